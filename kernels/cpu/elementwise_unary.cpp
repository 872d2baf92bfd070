// CPU unary elementwise ops (unary_cpu), in the loops of kernels/cpu/elementwise_cpu.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"

namespace kiln {
namespace cpu {
namespace {

constexpr int64_t kGrain = 16384;

// The contiguous loop, in clones for the CPU's vector width (KILN_CPU_CLONES, loops.h).
template <UnaryOp OP, typename C> KILN_CPU_CLONES void unary_run(C* o, const C* x, int64_t n, C a, C b) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew::unary_fn<OP, C>(x[i], a, b);
}

template <UnaryOp OP, typename C> void unary_typed(const StridedArg& out, const Operand& in, C a, C b) {
  const int64_t n = out.numel();
  const DType ct = dtype_of<C>();
  if (dense_as(out, ct) && !in.is_scalar && dense_as(in.arg, ct)) {
    C* o = static_cast<C*>(out.data);
    const C* x = static_cast<const C*>(in.arg.data);
    cpu::parallel_for(n, kGrain,
                      [&](int64_t, int64_t b0, int64_t e0) { unary_run<OP, C>(o + b0, x + b0, e0 - b0, a, b); });
    return;
  }
  if constexpr (std::is_same_v<C, float>) {
    if (!in.is_scalar && dense_widens(out) && dense_widens(in.arg)) {
      cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
        float xbuf[kWideBlock];
        widened_blocks(out, b0, e0, [&](float* o, int64_t i, int64_t m) {
          const float* x = widened(in.arg, i, m, xbuf);
          // A cast's op is the identity: the conversions are the whole of it.
          if constexpr (OP == UnaryOp::Copy) {
            if (o != x) std::copy_n(x, m, o);
          } else {
            unary_run<OP, C>(o, x, m, a, b);
          }
        });
      });
      return;
    }
  }
  const int64_t zero[kMaxDims] = {};
  const int64_t* strides[2] = {out.strides, in.is_scalar ? zero : in.arg.strides};
  if (out.dtype == ct && (in.is_scalar || in.arg.dtype == ct)) {  // strided, but no conversions
    C* o = static_cast<C*>(out.data);
    const C scalar = in.is_scalar ? static_cast<C>(in.scalar) : C(0);
    const C* x = in.is_scalar ? &scalar : static_cast<const C*>(in.arg.data);
    cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_rows<2>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off, int64_t count, const int64_t* st) {
        C* po = o + off[0];
        const C* px = x + off[1];
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < count; ++i) po[i] = ew::unary_fn<OP, C>(px[i], a, b);
        } else {
          for (int64_t i = 0; i < count; ++i) po[i * st[0]] = ew::unary_fn<OP, C>(px[i * st[1]], a, b);
        }
      });
    });
    return;
  }
  cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
    cpu::nd_loop<2>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
      store_as<C>(out.data, out.dtype, off[0], ew::unary_fn<OP, C>(operand_value<C>(in, off[1]), a, b));
    });
  });
}

template <UnaryOp OP> void unary_dispatch(const StridedArg& out, const Operand& in, DType compute, double a, double b) {
  visit_compute(compute,
                [&]<typename C>() { unary_typed<OP, C>(out, in, ew::to_compute<C>(a), ew::to_compute<C>(b)); });
}

}  // namespace
}  // namespace cpu

void unary_cpu(const StridedArg& out, const Operand& in, UnaryOp op, DType compute, double a, double b,
               const KernelContext&) {
  if (is_integral(compute, true) && op == UnaryOp::Clamp) {
    // NaN means "no bound": turn it into the widest integer bound.
    if (std::isnan(a)) a = static_cast<double>(std::numeric_limits<int64_t>::lowest());
    if (std::isnan(b)) b = static_cast<double>(std::numeric_limits<int64_t>::max());
  }
#define KILN_UNARY_CASE(NAME) \
  case UnaryOp::NAME: cpu::unary_dispatch<UnaryOp::NAME>(out, in, compute, a, b); return;
  switch (op) {
    KILN_FOR_EACH_UNARY_OP(KILN_UNARY_CASE)
  }
#undef KILN_UNARY_CASE
}

}  // namespace kiln
