// CPU unary elementwise ops (unary_cpu), in the loops of kernels/cpu/elementwise_cpu.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Every element of out set to the element at `value` (out's dtype, element_size bytes), copied as
// an integer of that size: a fill's one conversion made once, not once per element.
template <typename U> void fill_as(const StridedArg& out, const void* value) {
  U v;
  std::memcpy(&v, value, sizeof(U));
  U* o = static_cast<U*>(out.data);
  const int64_t* strides[1] = {out.strides};
  cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
    cpu::nd_rows<1>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off, int64_t count, const int64_t* st) {
      U* po = o + off[0];
      if (st[0] == 1) {
        std::fill_n(po, count, v);
      } else {
        for (int64_t i = 0; i < count; ++i) po[i * st[0]] = v;
      }
    });
  });
}

template <UnaryOp OP, typename C> void unary_typed(const StridedArg& out, const Operand& in, C a, C b) {
  const int64_t n = out.numel();
  const DType ct = dtype_of<C>();
  if (in.is_scalar) {  // a constant (fills): the op and the store's conversion once, then its bytes
    alignas(8) unsigned char value[8] = {};
    store_as<C>(value, out.dtype, 0, ew::unary_fn<OP, C>(scalar_as<C>(in), a, b));
    switch (element_size(out.dtype)) {
      case 1: return fill_as<uint8_t>(out, value);
      case 2: return fill_as<uint16_t>(out, value);
      case 4: return fill_as<uint32_t>(out, value);
      case 8: return fill_as<uint64_t>(out, value);
      default: break;  // no such dtype; the element loops below take it
    }
  }
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
    const C scalar = in.is_scalar ? scalar_as<C>(in) : C(0);
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
  // With conversions: runs along the innermost dim, a run where both sides are unit-stride and
  // convert to float (a view's rows, as when a head's gradient is written into a fused projection's
  // gradient) through float blocks when it is at least a vector long, the rest an element at a time.
  const bool wide_runs = std::is_same_v<C, float> && !in.is_scalar && widens_to_float(out.dtype) &&
                         widens_to_float(in.arg.dtype);
  cpu::parallel_for(n, kGrain, [&](int64_t, int64_t b0, int64_t e0) {
    cpu::nd_rows<2>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off, int64_t count, const int64_t* st) {
      if constexpr (std::is_same_v<C, float>) {
        if (wide_runs && st[0] == 1 && st[1] == 1 && count >= 8) {
          widened_run(out, off[0], in.arg, off[1], count, [&](float* o, const float* x, int64_t m) {
            if constexpr (OP == UnaryOp::Copy) {
              if (o != x) std::copy_n(x, m, o);
            } else {
              unary_run<OP, C>(o, x, m, a, b);
            }
          });
          return;
        }
      }
      for (int64_t i = 0; i < count; ++i) {
        store_as<C>(out.data, out.dtype, off[0] + i * st[0],
                    ew::unary_fn<OP, C>(operand_value<C>(in, off[1] + i * st[1]), a, b));
      }
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
