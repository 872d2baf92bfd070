// The CPU elementwise ops' widened loop (kernels/cpu/elementwise_cpu.h): dense operands of float32,
// float16 and bfloat16 with a float compute type run a block at a time through float buffers. Its
// bits must be those of the loop that converts every element on its own, which the same operands
// take when they are handed over as 2-d: the test runs each op both ways over the same bytes and
// compares. Lengths around the block of 256 and past the pool's chunk of 16384, values that round
// up, overflow float16, are subnormal in it, NaN, infinite and -0, casts between the three dtypes,
// unary and binary ops with tensor and scalar operands, mixed dtypes, and an op into its own input.
// Also the strided loops' rows through float blocks, and fills, against the same converting loop.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/elementwise.h"
#include "kernels/factory.h"
#include "tests/hardware_half.h"
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

// t's elements as one dense run (the widened loop's operand), or as an [n, 1] matrix whose last
// dim's stride is not 1, which neither the dense loops nor the strided loops' widened runs take
// (the converting loop's).
StridedArg as_arg(const Tensor& t, bool dense) {
  StridedArg a;
  a.data = const_cast<void*>(t.data_ptr());
  a.dtype = t.dtype();
  a.ndim = dense ? 1 : 2;
  a.sizes[0] = t.numel();
  a.strides[0] = 1;
  a.sizes[1] = 1;
  a.strides[1] = 2;  // a dim of size 1: never stepped along
  return a;
}

// A [rows, cols] view of `t` (at least rows x ld elements) with rows `ld` apart.
StridedArg rows_arg(const Tensor& t, int64_t rows, int64_t cols, int64_t ld) {
  StridedArg a;
  a.data = const_cast<void*>(t.data_ptr());
  a.dtype = t.dtype();
  a.ndim = 2;
  a.sizes[0] = rows;
  a.sizes[1] = cols;
  a.strides[0] = ld;
  a.strides[1] = 1;
  return a;
}

// Element i of `t`'s storage, as bytes.
std::vector<unsigned char> bytes_at(const Tensor& t, int64_t i) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr()) + static_cast<size_t>(i) * t.element_size();
  return std::vector<unsigned char>(p, p + t.element_size());
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

// The strided loops' runs: a view whose rows are unit-stride but lie apart (a head's rows inside a
// fused projection, or its gradient's) runs each row through float blocks when every operand
// converts to float. Its bits must be the converting loop's, the gaps between the rows untouched;
// with the hardware float16 conversions and without.
TEST_CASE("elementwise on the CPU: strided rows through float blocks give the converting loop's bits",
          "[elementwise]") {
  test::ThreadCountGuard threads;
  cpu::set_num_threads(2);
  const test::HardwareHalfGuard restore;
  const KernelContext ctx{};
  const struct {
    int64_t rows, cols;
  } shapes[] = {{3, 300}, {40, 7}, {2, 1000}};
  for (const bool hardware : {true, false}) {
    cpu::set_hardware_half(hardware);
    for (const auto& shape : shapes) {
      const int64_t rows = shape.rows, cols = shape.cols, n = rows * cols, ldx = cols + 5, ldo = cols + 3;
      const std::vector<float> v = specials(n);
      for (const DType xt : kFloats) {
        const Tensor x = holding(v, xt);
        // x's values in rows ldx apart (copied byte by byte: the copy under test is not used).
        const Tensor xg = full({rows, ldx}, 7.0, TensorOptions(xt));
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(static_cast<char*>(xg.data_ptr()) + r * ldx * static_cast<int64_t>(xg.element_size()),
                      static_cast<const char*>(x.data_ptr()) + r * cols * static_cast<int64_t>(x.element_size()),
                      static_cast<size_t>(cols) * x.element_size());
        }
        for (const DType ot : kFloats) {
          if (xt == DType::Float32 && ot == DType::Float32) continue;  // the typed strided loop's
          for (const UnaryOp op : {UnaryOp::Copy, UnaryOp::Exp, UnaryOp::Neg}) {
            INFO("unary op " << static_cast<int>(op) << ", " << rows << " x " << cols << ", x " << dtype_name(xt)
                             << ", out " << dtype_name(ot) << ", hardware float16 " << cpu::hardware_half());
            const Tensor og = full({rows, ldo}, -3.0, TensorOptions(ot));
            unary_cpu(rows_arg(og, rows, cols, ldo), Operand{rows_arg(xg, rows, cols, ldx), false, 0.0}, op,
                      DType::Float32, 0, 0, ctx);
            const Tensor each = empty({n}, TensorOptions(ot));
            unary_cpu(as_arg(each, false), tensor_operand(x, false), op, DType::Float32, 0, 0, ctx);
            const std::vector<unsigned char> gap = bytes_at(full({1}, -3.0, TensorOptions(ot)), 0);
            int64_t bad = 0, gaps_written = 0;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < ldo; ++c) {
                if (c < cols) {
                  bad += bytes_at(og, r * ldo + c) == bytes_at(each, r * cols + c) ? 0 : 1;
                } else {
                  gaps_written += bytes_at(og, r * ldo + c) == gap ? 0 : 1;
                }
              }
            }
            CHECK(bad == 0);
            CHECK(gaps_written == 0);
          }
        }
      }
    }
  }
}

// A constant (a fill, or any unary op of a scalar) converts its value once and stores those bytes in
// every element: the conversion the element loops made per element, in every dtype, into a dense
// tensor, into rows with gaps and into every other element, the gaps staying as they were.
TEST_CASE("elementwise on the CPU: a fill stores its value's one conversion in every element", "[elementwise]") {
  test::ThreadCountGuard threads;
  cpu::set_num_threads(2);
  const KernelContext ctx{};
  const DType dtypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32,
                          DType::Int64,   DType::UInt8,   DType::Bool};
  const double values[] = {0.1, -0.0, 70000.0, 1e-8, -3.0, std::numeric_limits<double>::quiet_NaN(), 1.0};
  const int64_t rows = 37, cols = 700, ld = cols + 9;
  for (const DType t : dtypes) {
    for (const double value : values) {
      if (std::isnan(value) && !is_floating(t)) continue;  // the op refuses it before the kernel
      INFO(dtype_name(t) << ", value " << value);
      // The conversion the element loops make: the scalar in the compute type, stored as t.
      std::vector<unsigned char> want(static_cast<size_t>(element_size(t)));
      cpu::visit_compute(compute_dtype_for(t),
                         [&]<typename C>() { cpu::store_as<C>(want.data(), t, 0, static_cast<C>(value)); });
      const int64_t int_value = Scalar(value).to_int();  // the integer twin of the scalar, as ops pass it
      const Tensor dense = empty({rows * cols}, TensorOptions(t));
      fill_cpu(as_arg(dense, true), value, int_value, ctx);
      const Tensor gapped = full({rows, ld}, 5.0, TensorOptions(t));
      const std::vector<unsigned char> gap = bytes_at(gapped, 0);
      fill_cpu(rows_arg(gapped, rows, cols, ld), value, int_value, ctx);
      // And every other element of a run (an inner stride of 2).
      const Tensor strided = full({2 * cols}, 5.0, TensorOptions(t));
      StridedArg every_other = as_arg(strided, true);
      every_other.sizes[0] = cols;
      every_other.strides[0] = 2;
      fill_cpu(every_other, value, int_value, ctx);
      int64_t bad = 0, gaps_written = 0;
      for (int64_t i = 0; i < rows * cols; ++i) bad += bytes_at(dense, i) == want ? 0 : 1;
      for (int64_t i = 0; i < 2 * cols; ++i) {
        if (i % 2 == 0) {
          bad += bytes_at(strided, i) == want ? 0 : 1;
        } else {
          gaps_written += bytes_at(strided, i) == gap ? 0 : 1;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < ld; ++c) {
          if (c < cols) {
            bad += bytes_at(gapped, r * ld + c) == want ? 0 : 1;
          } else {
            gaps_written += bytes_at(gapped, r * ld + c) == gap ? 0 : 1;
          }
        }
      }
      CHECK(bad == 0);
      CHECK(gaps_written == 0);
    }
  }
}
