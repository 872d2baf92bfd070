// CPU fills: a constant is a copy of a scalar through the elementwise path (one cast rule for every
// dtype); arange computes each element from its index, never by accumulation, so no error builds up.
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"
#include "kernels/factory.h"

namespace kiln {
namespace {

using cpu::store_as;
using cpu::visit_compute;

constexpr int64_t kGrain = 16384;

}  // namespace

void fill_cpu(const StridedArg& out, double value, int64_t int_value, const KernelContext& ctx) {
  Operand v;
  v.is_scalar = true;
  v.scalar = fill_compute_value(out.dtype, value, int_value);
  v.int_scalar = int_value;
  unary_cpu(out, v, UnaryOp::Copy, compute_dtype_for(out.dtype), 0, 0, ctx);
}

void arange_cpu(const StridedArg& out, double start, double step, const KernelContext&) {
  const int64_t* strides[1] = {out.strides};
  visit_compute(compute_dtype_for(out.dtype), [&]<typename C>() {
    cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      int64_t i = b0;
      cpu::nd_loop<1>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
        if constexpr (std::is_integral_v<C>) {
          store_as<C>(out.data, out.dtype, off[0], static_cast<C>(start) + static_cast<C>(i) * static_cast<C>(step));
        } else {
          store_as<double>(out.data, out.dtype, off[0], start + static_cast<double>(i) * step);
        }
        ++i;
      });
    });
  });
}

}  // namespace kiln
