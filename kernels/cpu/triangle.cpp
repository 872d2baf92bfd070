// CPU tril/triu: a strided copy that writes zero outside the kept triangle; the row and column of each
// element come from its logical index, so any layout works.
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"
#include "kernels/triangle.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;
using cpu::visit_compute;

constexpr int64_t kGrain = 16384;

}  // namespace

void triangle_cpu(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const KernelContext&) {
  const int nd = out.ndim;
  const int64_t rows = out.sizes[nd - 2], cols = out.sizes[nd - 1];
  const int64_t* strides[2] = {out.strides, in.strides};
  visit_compute(compute_dtype_for(out.dtype), [&]<typename C>() {
    cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      int64_t i = b0;
      cpu::nd_loop<2>(nd, out.sizes, strides, b0, e0, [&](const int64_t* off) {
        int64_t c = i % cols, r = (i / cols) % rows;
        bool keep = upper ? (c - r >= k) : (c - r <= k);
        store_as<C>(out.data, out.dtype, off[0], keep ? load_as<C>(in.data, in.dtype, off[1]) : C(0));
        ++i;
      });
    });
  });
}

}  // namespace kiln
