// Typed reduction loops. Written as plain loops over contiguous buffers so the compiler vectorizes
// the float32 and integer cases. The 16-bit floats go a block at a time: both operands widened to
// float32 in bulk (kernels/cpu/convert.h: F16C for float16 where the CPU has it), the float loop,
// the result narrowed back. Element by element, each value went through the scalar conversion,
// which in software cost float16 an order of magnitude (measured: docs/distributed.md).
// The results are the same bits: each element is still computed in float32 and rounded once.
#include "dist/reduce.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/ops/elementwise.h"
#include "kernels/cpu/convert.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace kiln::dist::detail {
namespace {

// The arithmetic type of a sum or product: C itself for a float, its unsigned twin for an integer,
// so that the result wraps modulo 2^bits (as PyTorch's integer collectives) instead of overflowing
// a signed type (undefined in C++).
template <typename C, bool = std::is_integral_v<C>>
struct WrappingOf {
  using type = C;
};
template <typename C>
struct WrappingOf<C, true> {
  using type = std::make_unsigned_t<C>;
};
template <typename C>
using Wrapping = typename WrappingOf<C>::type;

template <typename T, typename C>
void reduce_typed(T* acc, const T* in, int64_t n, ReduceOp op) {
  using W = Wrapping<C>;
  switch (op) {
    case ReduceOp::Max:
      for (int64_t i = 0; i < n; ++i) {
        const C a = static_cast<C>(acc[i]), b = static_cast<C>(in[i]);
        acc[i] = static_cast<T>(b > a || b != b ? b : a);  // NaN wins, as in PyTorch's max
      }
      return;
    case ReduceOp::Min:
      for (int64_t i = 0; i < n; ++i) {
        const C a = static_cast<C>(acc[i]), b = static_cast<C>(in[i]);
        acc[i] = static_cast<T>(b < a || b != b ? b : a);  // NaN wins, as in PyTorch's min
      }
      return;
    case ReduceOp::Product:
      for (int64_t i = 0; i < n; ++i) {
        acc[i] = static_cast<T>(
            static_cast<C>(static_cast<W>(static_cast<C>(acc[i])) * static_cast<W>(static_cast<C>(in[i]))));
      }
      return;
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      for (int64_t i = 0; i < n; ++i) {
        acc[i] = static_cast<T>(
            static_cast<C>(static_cast<W>(static_cast<C>(acc[i])) + static_cast<W>(static_cast<C>(in[i]))));
      }
      return;
  }
}

// float16 and bfloat16: reduce_typed<float, float> over float blocks of both operands.
void reduce_16bit(void* acc, const void* in, int64_t n, DType dtype, ReduceOp op) {
  float a[cpu::kFloatBlock], b[cpu::kFloatBlock];
  auto* acc_bytes = static_cast<char*>(acc);
  const auto* in_bytes = static_cast<const char*>(in);
  cpu::for_float_blocks(n, [&](int64_t i, int64_t m) {
    cpu::widen_to_float(a, acc_bytes + i * 2, dtype, m);
    cpu::widen_to_float(b, in_bytes + i * 2, dtype, m);
    reduce_typed<float, float>(a, b, m, op);
    cpu::narrow_from_float(acc_bytes + i * 2, dtype, a, m);
  });
}

// t[i] = t[i] / divisor, computed in double and rounded to float then to the 16-bit type (what the
// 16-bit types' conversion from a double does), over float blocks.
void divide_16bit(void* t, int64_t n, DType dtype, double divisor) {
  float a[cpu::kFloatBlock];
  auto* bytes = static_cast<char*>(t);
  cpu::for_float_blocks(n, [&](int64_t i, int64_t m) {
    cpu::widen_to_float(a, bytes + i * 2, dtype, m);
    for (int64_t j = 0; j < m; ++j) a[j] = static_cast<float>(static_cast<double>(a[j]) / divisor);
    cpu::narrow_from_float(bytes + i * 2, dtype, a, m);
  });
}

}  // namespace

bool supports(DType dtype, ReduceOp op) {
  if (op == ReduceOp::Avg) return is_floating(dtype);
  return true;
}

ReduceOp effective_op(DType dtype, ReduceOp op) {
  if (dtype != DType::Bool) return op;
  if (op == ReduceOp::Sum) return ReduceOp::Max;
  if (op == ReduceOp::Product) return ReduceOp::Min;
  return op;
}

void check_supported(const char* collective, DType dtype, ReduceOp op) {
  if (supports(dtype, op)) return;
  throw DTypeError(std::string(collective) + ": " + reduce_op_name(op) + " of " + dtype_name(dtype) +
                   " tensors is not supported" + (op == ReduceOp::Avg ? " (avg needs a float dtype)" : ""));
}

void reduce_into(void* acc, const void* in, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::Float32: return reduce_typed<float, float>(static_cast<float*>(acc), static_cast<const float*>(in), n, op);
    case DType::Float64:
      return reduce_typed<double, double>(static_cast<double*>(acc), static_cast<const double*>(in), n, op);
    case DType::Float16:
    case DType::BFloat16: return reduce_16bit(acc, in, n, dtype, op);
    case DType::Int32:
      return reduce_typed<int32_t, int32_t>(static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), n, op);
    case DType::Int64:
      return reduce_typed<int64_t, int64_t>(static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), n, op);
    case DType::UInt8:
      return reduce_typed<uint8_t, uint8_t>(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), n, op);
    case DType::Bool:
      // Bytes of 0 or 1: their maximum is "any", their minimum "all" (effective_op maps Sum and Product).
      if (op != ReduceOp::Max && op != ReduceOp::Min) break;
      return reduce_typed<uint8_t, uint8_t>(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), n, op);
  }
  throw DTypeError(std::string("dist: cannot reduce ") + dtype_name(dtype) + " tensors by " + reduce_op_name(op));
}

void divide(void* t, int64_t n, DType dtype, double divisor) {
  switch (dtype) {
    case DType::Float32: {
      auto* p = static_cast<float*>(t);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(static_cast<double>(p[i]) / divisor);
      return;
    }
    case DType::Float64: {
      auto* p = static_cast<double*>(t);
      for (int64_t i = 0; i < n; ++i) p[i] /= divisor;
      return;
    }
    case DType::Float16:
    case DType::BFloat16: return divide_16bit(t, n, dtype, divisor);
    default: break;
  }
  throw DTypeError(std::string("dist: Avg needs a float dtype, got ") + dtype_name(dtype));
}

void reduce_tensor(Tensor& acc, const Tensor& in, ReduceOp op) {
  if (acc.is_cpu()) {
    reduce_into(acc.data_ptr(), in.data_ptr(), acc.numel(), acc.dtype(), op);
    return;
  }
  const bool logical = acc.dtype() == DType::Bool;
  switch (op) {
    case ReduceOp::Max: acc.copy_(logical ? logical_or(acc, in) : maximum(acc, in)); return;
    case ReduceOp::Min: acc.copy_(logical ? logical_and(acc, in) : minimum(acc, in)); return;
    case ReduceOp::Product: acc.mul_(in); return;
    case ReduceOp::Sum:
    case ReduceOp::Avg: acc.add_(in); return;
  }
}

void divide_tensor(Tensor& t, double divisor) {
  if (t.is_cpu()) {
    divide(t.data_ptr(), t.numel(), t.dtype(), divisor);
  } else {
    t.div_(Scalar(divisor));
  }
}

}  // namespace kiln::dist::detail
