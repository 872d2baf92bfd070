// The CPU elementwise ops' widened loop (kernels/cpu/elementwise_cpu.h): dense operands of float32,
// float16 and bfloat16 with a float compute type run a block at a time through float buffers. Its
// bits must be those of the loop that converts every element on its own, which the same operands
// take when they are handed over as 2-d: the test runs each op both ways over the same bytes and
// compares. Lengths around the block of 256 and past the pool's chunk of 16384, values that round
// up, overflow float16, are subnormal in it, NaN, infinite and -0, casts between the three dtypes,
// unary and binary ops with tensor and scalar operands, mixed dtypes, and an op into its own input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "kernels/elementwise.h"
#include "tests/threads.h"

using namespace kiln;

namespace {

// n float32 values of every kind the conversions treat apart, then random ones of several scales.
std::vector<float> specials(int64_t n) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edge{0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, -nan,
                                65504.0f, 65520.0f, 70000.0f, -1e6f,         // float16's max, overflow
                                6e-8f, 3e-8f, -1e-7f, 1e-40f,                // float16 subnormals, float32's
                                1.00390625f, 1.01171875f, 1.0009765625f,     // bfloat16 and float16 ties
                                3.3895314e38f, 1e-3f, 0.333333f, 88.0f, -88.0f};
  std::vector<float> v(static_cast<size_t>(n));
  manual_seed(31);
  const std::vector<float> r = (randn({n}) * 5.0).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    v[u] = i < static_cast<int64_t>(edge.size()) ? edge[u] : r[u] * (i % 3 == 0 ? 1e-3f : i % 3 == 1 ? 1.0f : 300.0f);
  }
  return v;
}

// A tensor of dtype t holding `values` rounded to it (a dtype's own rounding, as .to() does).
Tensor holding(const std::vector<float>& values, DType t) {
  return tensor(values, {static_cast<int64_t>(values.size())}).to(t);
}

// t's elements as one dense run (the widened loop's operand), or as an [n, 1] matrix, which the
// dense loops do not take (the converting loop's).
StridedArg as_arg(const Tensor& t, bool dense) {
  StridedArg a;
  a.data = const_cast<void*>(t.data_ptr());
  a.dtype = t.dtype();
  a.ndim = dense ? 1 : 2;
  a.sizes[0] = t.numel();
  a.strides[0] = 1;
  a.sizes[1] = 1;
  a.strides[1] = 1;
  return a;
}
Operand tensor_operand(const Tensor& t, bool dense) { return Operand{as_arg(t, dense), false, 0.0}; }

// Whether a and b hold the same bits, element by element, except that two NaNs match when
// `any_nan`: an op's NaN result may take either operand's sign once the compiler orders a
// commutative product differently in the vector loop (GELU's x * sigmoid(2u) does), whereas a cast
// keeps a NaN's bits.
int64_t mismatches(const Tensor& a, const Tensor& b, bool any_nan) {
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  const size_t es = a.element_size();
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const size_t u = static_cast<size_t>(i);
    if (any_nan && std::isnan(va[u]) && std::isnan(vb[u])) continue;
    const auto* pa = static_cast<const unsigned char*>(a.data_ptr()) + u * es;
    const auto* pb = static_cast<const unsigned char*>(b.data_ptr()) + u * es;
    if (std::memcmp(pa, pb, es) != 0) ++bad;
  }
  return bad;
}

// op(out, x) run the widened way and the converting way into two outputs of dtype out_t; x is
// given, or with in_place, the output itself starts as x (of dtype out_t) and is written over.
template <typename Run>
void compare(const std::string& what, const Tensor& x, DType out_t, bool in_place, const Run& run) {
  INFO(what << ", n " << x.numel() << ", x " << dtype_name(x.dtype()) << ", out " << dtype_name(out_t)
            << (in_place ? ", in place" : ""));
  Tensor wide = in_place ? x.clone() : empty({x.numel()}, TensorOptions(out_t));
  Tensor each = in_place ? x.clone() : empty({x.numel()}, TensorOptions(out_t));
  run(as_arg(wide, true), tensor_operand(in_place ? wide : x, true));
  run(as_arg(each, false), tensor_operand(in_place ? each : x, false));
  CHECK(mismatches(wide, each, what != "cast") == 0);
}

const DType kFloats[] = {DType::Float32, DType::Float16, DType::BFloat16};

}  // namespace

TEST_CASE("elementwise on the CPU: the widened loop gives the converting loop's bits", "[elementwise]") {
  test::ThreadCountGuard threads;
  cpu::set_num_threads(2);
  const KernelContext ctx{};
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{1000}, int64_t{16384 + 300}}) {
    const std::vector<float> v = specials(n);
    std::vector<float> w = specials(n + 7);
    w.erase(w.begin(), w.begin() + 7);  // another order of the same kinds of values
    for (const DType xt : kFloats) {
      const Tensor x = holding(v, xt);
      for (const DType ot : kFloats) {
        if (xt == DType::Float32 && ot == DType::Float32) continue;  // the typed loop's
        compare("cast", x, ot, false, [&](const StridedArg& o, const Operand& in) {
          unary_cpu(o, in, UnaryOp::Copy, DType::Float32, 0, 0, ctx);
        });
        compare("exp", x, ot, false, [&](const StridedArg& o, const Operand& in) {
          unary_cpu(o, in, UnaryOp::Exp, DType::Float32, 0, 0, ctx);
        });
        compare("gelu", x, ot, false, [&](const StridedArg& o, const Operand& in) {
          unary_cpu(o, in, UnaryOp::GeluTanh, DType::Float32, 0, 0, ctx);
        });
        compare("clamp", x, ot, false, [&](const StridedArg& o, const Operand& in) {
          unary_cpu(o, in, UnaryOp::Clamp, DType::Float32, -2.5, 1e5, ctx);
        });
        for (const DType yt : kFloats) {
          const Tensor y = holding(w, yt);
          compare("add, alpha 1.5, y " + std::string(dtype_name(yt)), x, ot, false,
                  [&](const StridedArg& o, const Operand& in) {
                    binary_cpu(o, in, tensor_operand(y, o.ndim == 1), BinaryOp::Add, DType::Float32, 1.5, 0, ctx);
                  });
          compare("maximum, y " + std::string(dtype_name(yt)), x, ot, false,
                  [&](const StridedArg& o, const Operand& in) {
                    binary_cpu(o, in, tensor_operand(y, o.ndim == 1), BinaryOp::Maximum, DType::Float32, 1, 0, ctx);
                  });
        }
        compare("div by a scalar", x, ot, false, [&](const StridedArg& o, const Operand& in) {
          binary_cpu(o, in, Operand{{}, true, 3.0}, BinaryOp::Div, DType::Float32, 1, 0, ctx);
        });
      }
      // In place: out is x (the same dtype), y of each dtype.
      if (xt == DType::Float32) continue;
      compare("neg in place", x, xt, true, [&](const StridedArg& o, const Operand& in) {
        unary_cpu(o, in, UnaryOp::Neg, DType::Float32, 0, 0, ctx);
      });
      for (const DType yt : kFloats) {
        const Tensor y = holding(w, yt);
        compare("mul in place, y " + std::string(dtype_name(yt)), x, xt, true,
                [&](const StridedArg& o, const Operand& in) {
                  binary_cpu(o, in, tensor_operand(y, o.ndim == 1), BinaryOp::Mul, DType::Float32, 1, 0, ctx);
                });
      }
    }
  }
}
