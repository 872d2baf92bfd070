// CPU where (where_cpu): out = cond ? x : y, through the casting strided loop.
#include <cstdint>

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"

namespace kiln {
namespace {

constexpr int64_t kGrain = 16384;

}  // namespace

void where_cpu(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
               const KernelContext&) {
  const int64_t zero[kMaxDims] = {};
  const int64_t* strides[4] = {out.strides, cond.strides, x.is_scalar ? zero : x.arg.strides,
                               y.is_scalar ? zero : y.arg.strides};
  cpu::visit_compute(compute, [&]<typename C>() {
    cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_loop<4>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
        bool c = cpu::load_as<int64_t>(cond.data, cond.dtype, off[1]) != 0;
        C v = c ? cpu::operand_value<C>(x, off[2]) : cpu::operand_value<C>(y, off[3]);
        cpu::store_as<C>(out.data, out.dtype, off[0], v);
      });
    });
  });
}

}  // namespace kiln
