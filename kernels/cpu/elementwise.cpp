// CPU reference for the generic elementwise path. Three loops per op: a typed loop when every
// operand is 1-D, unit-stride and already of the compute type (the compiler vectorizes it, in a
// baseline and an AVX2 clone: KILN_CPU_CLONES); a typed
// strided loop, run by run of the innermost dim, when no operand needs a conversion (broadcasts and
// views); and a strided loop that casts on load and store for everything else.
#include <cmath>
#include <limits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;
using cpu::visit_compute;

constexpr int64_t kGrain = 16384;

bool dense_as(const StridedArg& a, DType t) { return a.dtype == t && a.ndim == 1 && a.strides[0] == 1; }

template <typename C> C operand_value(const Operand& o, int64_t off) {
  return o.is_scalar ? static_cast<C>(o.scalar) : load_as<C>(o.arg.data, o.arg.dtype, off);
}

// The contiguous loops, in clones for the CPU's vector width (KILN_CPU_CLONES, loops.h).
template <UnaryOp OP, typename C> KILN_CPU_CLONES void unary_run(C* o, const C* x, int64_t n, C a, C b) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew::unary_fn<OP, C>(x[i], a, b);
}
template <BinaryOp OP, typename C>
KILN_CPU_CLONES void binary_run(C* o, const C* x, const C* y, int64_t n, C alpha, C beta) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew::binary_fn<OP, C>(x[i], y[i], alpha, beta);
}
template <BinaryOp OP, typename C>
KILN_CPU_CLONES void binary_run_scalar(C* o, const C* x, C y, int64_t n, C alpha, C beta) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew::binary_fn<OP, C>(x[i], y, alpha, beta);
}

template <UnaryOp OP, typename C> void unary_typed(const StridedArg& out, const Operand& in, C a, C b) {
  const int64_t n = out.numel();
  const DType ct = dtype_of<C>();
  if (dense_as(out, ct) && !in.is_scalar && dense_as(in.arg, ct)) {
    C* o = static_cast<C*>(out.data);
    const C* x = static_cast<const C*>(in.arg.data);
    cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) { unary_run<OP, C>(o + b0, x + b0, e0 - b0, a, b); });
    return;
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

template <BinaryOp OP, typename C>
void binary_typed(const StridedArg& out, const Operand& x, const Operand& y, C alpha, C beta) {
  const int64_t n = out.numel();
  const DType ct = dtype_of<C>();
  if (dense_as(out, ct) && !x.is_scalar && dense_as(x.arg, ct) && (y.is_scalar || dense_as(y.arg, ct))) {
    C* o = static_cast<C*>(out.data);
    const C* xp = static_cast<const C*>(x.arg.data);
    if (y.is_scalar) {
      const C yv = static_cast<C>(y.scalar);
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
  const int64_t zero[kMaxDims] = {};
  const int64_t* strides[3] = {out.strides, x.is_scalar ? zero : x.arg.strides, y.is_scalar ? zero : y.arg.strides};
  if (out.dtype == ct && (x.is_scalar || x.arg.dtype == ct) && (y.is_scalar || y.arg.dtype == ct)) {
    // Strided (a broadcast bias, a transposed view) but no conversions: typed runs of the innermost
    // dim, with loops the compiler vectorizes for the common stride patterns.
    C* o = static_cast<C*>(out.data);
    const C xs = x.is_scalar ? static_cast<C>(x.scalar) : C(0), ys = y.is_scalar ? static_cast<C>(y.scalar) : C(0);
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

// A double parameter in the compute type; integers saturate (int64's max is not a double, and an
// out-of-range conversion is undefined).
template <typename C> C to_compute(double v) {
  if constexpr (std::is_integral_v<C>) {
    if (v >= 0x1p63) return std::numeric_limits<C>::max();
    if (v <= -0x1p63) return std::numeric_limits<C>::lowest();
  }
  return static_cast<C>(v);
}

template <UnaryOp OP> void unary_dispatch(const StridedArg& out, const Operand& in, DType compute, double a, double b) {
  visit_compute(compute, [&]<typename C>() { unary_typed<OP, C>(out, in, to_compute<C>(a), to_compute<C>(b)); });
}

template <BinaryOp OP>
void binary_dispatch(const StridedArg& out, const Operand& x, const Operand& y, DType compute, double alpha, double beta) {
  visit_compute(compute, [&]<typename C>() {
    if constexpr (std::is_integral_v<C>) {
      // NaN bounds cannot be represented in integers; ClampBackward on integers never happens.
      binary_typed<OP, C>(out, x, y, static_cast<C>(std::isnan(alpha) ? 0 : alpha),
                          static_cast<C>(std::isnan(beta) ? 0 : beta));
    } else {
      binary_typed<OP, C>(out, x, y, static_cast<C>(alpha), static_cast<C>(beta));
    }
  });
}

}  // namespace

void unary_cpu(const StridedArg& out, const Operand& in, UnaryOp op, DType compute, double a, double b,
               const KernelContext&) {
  if (is_integral(compute, true) && op == UnaryOp::Clamp) {
    // NaN means "no bound": turn it into the widest integer bound.
    if (std::isnan(a)) a = static_cast<double>(std::numeric_limits<int64_t>::lowest());
    if (std::isnan(b)) b = static_cast<double>(std::numeric_limits<int64_t>::max());
  }
#define KILN_UNARY_CASE(NAME) \
  case UnaryOp::NAME: unary_dispatch<UnaryOp::NAME>(out, in, compute, a, b); return;
  switch (op) {
    KILN_FOR_EACH_UNARY_OP(KILN_UNARY_CASE)
  }
#undef KILN_UNARY_CASE
}

void binary_cpu(const StridedArg& out, const Operand& x, const Operand& y, BinaryOp op, DType compute, double alpha,
                double beta, const KernelContext&) {
#define KILN_BINARY_CASE(NAME) \
  case BinaryOp::NAME: binary_dispatch<BinaryOp::NAME>(out, x, y, compute, alpha, beta); return;
  switch (op) {
    KILN_FOR_EACH_BINARY_OP(KILN_BINARY_CASE)
  }
#undef KILN_BINARY_CASE
}

void where_cpu(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
               const KernelContext&) {
  const int64_t zero[kMaxDims] = {};
  const int64_t* strides[4] = {out.strides, cond.strides, x.is_scalar ? zero : x.arg.strides,
                               y.is_scalar ? zero : y.arg.strides};
  visit_compute(compute, [&]<typename C>() {
    cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_loop<4>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
        bool c = load_as<int64_t>(cond.data, cond.dtype, off[1]) != 0;
        C v = c ? operand_value<C>(x, off[2]) : operand_value<C>(y, off[3]);
        store_as<C>(out.data, out.dtype, off[0], v);
      });
    });
  });
}

}  // namespace kiln
