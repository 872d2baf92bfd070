// CPU binary elementwise ops (binary_cpu), in the loops of kernels/cpu/elementwise_cpu.h.
#include <cmath>
#include <cstdint>
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

// The contiguous loops, in clones for the CPU's vector width (KILN_CPU_CLONES, loops.h).
template <BinaryOp OP, typename C>
KILN_CPU_CLONES void binary_run(C* o, const C* x, const C* y, int64_t n, C alpha, C beta) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew::binary_fn<OP, C>(x[i], y[i], alpha, beta);
}
template <BinaryOp OP, typename C>
KILN_CPU_CLONES void binary_run_scalar(C* o, const C* x, C y, int64_t n, C alpha, C beta) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew::binary_fn<OP, C>(x[i], y, alpha, beta);
}

template <BinaryOp OP, typename C>
void binary_typed(const StridedArg& out, const Operand& x, const Operand& y, C alpha, C beta) {
  const int64_t n = out.numel();
  const DType ct = dtype_of<C>();
  if (dense_as(out, ct) && !x.is_scalar && dense_as(x.arg, ct) && (y.is_scalar || dense_as(y.arg, ct))) {
    C* o = static_cast<C*>(out.data);
    const C* xp = static_cast<const C*>(x.arg.data);
    if (y.is_scalar) {
      const C yv = scalar_as<C>(y);
      cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
        binary_run_scalar<OP, C>(o + b0, xp + b0, yv, e0 - b0, alpha, beta);
      });
    } else {
      const C* yp = static_cast<const C*>(y.arg.data);
      cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
        binary_run<OP, C>(o + b0, xp + b0, yp + b0, e0 - b0, alpha, beta);
      });
    }
    return;
  }
  if constexpr (std::is_same_v<C, float>) {
    if (!x.is_scalar && dense_widens(out) && dense_widens(x.arg) && (y.is_scalar || dense_widens(y.arg))) {
      const C yv = y.is_scalar ? scalar_as<C>(y) : C(0);
      cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
        float xbuf[kWideBlock], ybuf[kWideBlock];
        widened_blocks(out, b0, e0, [&](float* o, int64_t i, int64_t m) {
          const float* xp = widened(x.arg, i, m, xbuf);
          if (y.is_scalar) {
            binary_run_scalar<OP, C>(o, xp, yv, m, alpha, beta);
          } else {
            binary_run<OP, C>(o, xp, widened(y.arg, i, m, ybuf), m, alpha, beta);
          }
        });
      });
      return;
    }
  }
  const int64_t zero[kMaxDims] = {};
  const int64_t* strides[3] = {out.strides, x.is_scalar ? zero : x.arg.strides, y.is_scalar ? zero : y.arg.strides};
  if (out.dtype == ct && (x.is_scalar || x.arg.dtype == ct) && (y.is_scalar || y.arg.dtype == ct)) {
    // Strided (a broadcast bias, a transposed view) but no conversions: typed runs of the innermost
    // dim, with loops the compiler vectorizes for the common stride patterns.
    C* o = static_cast<C*>(out.data);
    const C xs = x.is_scalar ? scalar_as<C>(x) : C(0), ys = y.is_scalar ? scalar_as<C>(y) : C(0);
    const C* xb = x.is_scalar ? &xs : static_cast<const C*>(x.arg.data);
    const C* yb = y.is_scalar ? &ys : static_cast<const C*>(y.arg.data);
    cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_rows<3>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off, int64_t count, const int64_t* st) {
        C* po = o + off[0];
        const C* px = xb + off[1];
        const C* py = yb + off[2];
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
          for (int64_t i = 0; i < count; ++i) po[i] = ew::binary_fn<OP, C>(px[i], py[i], alpha, beta);
        } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
          const C yv = *py;
          for (int64_t i = 0; i < count; ++i) po[i] = ew::binary_fn<OP, C>(px[i], yv, alpha, beta);
        } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
          const C xv = *px;
          for (int64_t i = 0; i < count; ++i) po[i] = ew::binary_fn<OP, C>(xv, py[i], alpha, beta);
        } else {
          for (int64_t i = 0; i < count; ++i) {
            po[i * st[0]] = ew::binary_fn<OP, C>(px[i * st[1]], py[i * st[2]], alpha, beta);
          }
        }
      });
    });
    return;
  }
  cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
    cpu::nd_loop<3>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
      C r = ew::binary_fn<OP, C>(operand_value<C>(x, off[1]), operand_value<C>(y, off[2]), alpha, beta);
      store_as<C>(out.data, out.dtype, off[0], r);
    });
  });
}

template <BinaryOp OP>
void binary_dispatch(const StridedArg& out, const Operand& x, const Operand& y, DType compute, double alpha,
                     double beta) {
  // For integers NaN parameters (no clamp bound; ClampBackward on integers never happens) become 0.
  visit_compute(compute, [&]<typename C>() {
    binary_typed<OP, C>(out, x, y, ew::to_compute<C>(alpha), ew::to_compute<C>(beta));
  });
}

}  // namespace
}  // namespace cpu

void binary_cpu(const StridedArg& out, const Operand& x, const Operand& y, BinaryOp op, DType compute, double alpha,
                double beta, const KernelContext&) {
#define KILN_BINARY_CASE(NAME) \
  case BinaryOp::NAME: cpu::binary_dispatch<BinaryOp::NAME>(out, x, y, compute, alpha, beta); return;
  switch (op) {
    KILN_FOR_EACH_BINARY_OP(KILN_BINARY_CASE)
  }
#undef KILN_BINARY_CASE
}

}  // namespace kiln
