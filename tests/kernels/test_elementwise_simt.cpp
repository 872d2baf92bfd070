// The elementwise kernels of kernels/cuda/elementwise_binary.cuh and elementwise_unary.cuh, their
// real source, run on the CPU through the emulator of CUDA's threads (kernels/simt/simt.h), picked
// and launched by binary_dispatch and unary_dispatch themselves, and compared bit for bit with
// binary_cpu and unary_cpu (all compute through kernels/elementwise_math.h). The cases reach each
// kernel, and the test asserts which one ran: the vector kernels for dense operands of the output's
// float dtype (whole 16-byte vectors and a tail, lengths around the vector's, an operand one
// element off 16-byte alignment so that everything is tail, scalars, fills, and out == in in
// place), the binary mixed kernel for a float32 output of add or mul from float16, bfloat16 and
// float32 operands (eight elements a step), the unary cast kernel between float32, float16 and
// bfloat16, and the generic kernels through offsets (transposed and broadcast operands, int64 and
// float64 compute, comparisons and logical_not into bool, casts of NaN, inf and huge floats to
// integers), and the uncommon math ops (rounding, tan, erfc, atan2, the rounding divisions and
// remainders), which have the generic kernel only. Maximum sees NaN on both sides, clamp and its
// backward their bounds. Each case runs in the dispatcher's grid and in a grid capped at 3 blocks;
// the output lies between guard bands.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/cuda/elementwise_binary.cuh"
#include "kernels/cuda/elementwise_unary.cuh"
#include "kernels/cuda/elementwise_where.cuh"
#include "kernels/elementwise.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace bd = kiln::binary_device;
namespace ud = kiln::unary_device;
namespace wd = kiln::where_device;

namespace {

Tensor values(const Shape& shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  return (randn(shape) * 3.0).to(dtype);
}

// A contiguous tensor's elements at an address one element past a 16-byte boundary.
Tensor misaligned(const Tensor& t) {
  const Tensor base = empty({t.numel() + 1}, TensorOptions(t.dtype()));
  Tensor view = base.narrow(0, 1, t.numel()).view(t.sizes());
  view.copy_(t);
  return view;
}

// Runs an op into an output shaped and strided like `out_like` (over dense storage) on the CPU,
// through cpu(out, x), and on the emulator, through emulated(out, x, launch), compares the bytes,
// and checks that the emulator ran `kernel`. x is the first operand; in place, it is the output
// (out_like's bytes are copied into each output first, and x reads from there).
template <typename Cpu, typename Emulated>
void compare(const std::string& what, const Tensor& out_like, const Operand& x, bool in_place, const void* kernel,
             const Cpu& cpu, const Emulated& emulated) {
  const StridedArg out_arg = ops::make_arg("test", out_like);
  const size_t bytes = static_cast<size_t>(out_like.numel()) * out_like.element_size();
  std::vector<unsigned char> want(bytes);
  if (in_place) std::memcpy(want.data(), out_like.data_ptr(), bytes);
  StridedArg cpu_out = out_arg;
  cpu_out.data = want.data();
  Operand cpu_x = x;
  if (in_place) cpu_x.arg.data = want.data();
  cpu(cpu_out, cpu_x);
  for (const unsigned grid_cap : {~0u, 3u}) {
    INFO(what << ", grid cap " << grid_cap);
    Guarded<unsigned char> emu(static_cast<int64_t>(bytes));
    if (in_place) std::memcpy(emu.data(), out_like.data_ptr(), bytes);
    StridedArg emu_out = out_arg;
    emu_out.data = emu.data();
    Operand emu_x = x;
    if (in_place) emu_x.arg.data = emu.data();
    std::vector<const void*> kernels;
    emulated(emu_out, emu_x, EmulatedLaunch{simt::Schedule::Lowest, grid_cap, &kernels});
    CHECK(kernels == std::vector<const void*>{kernel});
    CHECK(emu.bands_intact());
    CHECK(std::memcmp(emu.data(), want.data(), bytes) == 0);
  }
}

template <BinaryOp OP>
void check(const std::string& what, const Tensor& out_like, const Operand& x, const Operand& y, DType compute,
           double alpha, double beta, const void* kernel, bool in_place = false) {
  compare(
      what, out_like, x, in_place, kernel,
      [&](const StridedArg& out, const Operand& in) {
        binary_cpu(out, in, y, OP, compute, alpha, beta, KernelContext{});
      },
      [&](const StridedArg& out, const Operand& in, const EmulatedLaunch& launch) {
        bd::binary_dispatch<OP>(out, in, y, compute, alpha, beta, launch);
      });
}

// A unary op, its a and b as unary_cuda passes them (through unary_params).
template <UnaryOp OP>
void check_unary(const std::string& what, const Tensor& out_like, const Operand& x, DType compute, double a, double b,
                 const void* kernel, bool in_place = false) {
  double da = a, db = b;
  ud::unary_params(OP, compute, da, db);
  compare(
      what, out_like, x, in_place, kernel,
      [&](const StridedArg& out, const Operand& in) { unary_cpu(out, in, OP, compute, a, b, KernelContext{}); },
      [&](const StridedArg& out, const Operand& in, const EmulatedLaunch& launch) {
        ud::unary_dispatch<OP>(out, in, compute, da, db, launch);
      });
}

// where, with the condition cond.
void check_where(const std::string& what, const Tensor& out_like, const StridedArg& cond, const Operand& x,
                 const Operand& y, DType compute, const void* kernel) {
  compare(
      what, out_like, x, false, kernel,
      [&](const StridedArg& out, const Operand& in) { where_cpu(out, cond, in, y, compute, KernelContext{}); },
      [&](const StridedArg& out, const Operand& in, const EmulatedLaunch& launch) {
        wd::where_dispatch(out, cond, in, y, compute, launch);
      });
}

Operand operand(const Tensor& t, const Tensor& out) { return ops::make_operand("test", t, out.sizes()); }
Operand scalar(double v) { return ops::scalar_operand(Scalar(v)); }

}  // namespace

TEST_CASE("emulated: the vector kernel of binary ops gives the CPU's bits", "[simt][elementwise]") {
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{9}, int64_t{1027}}) {
    const std::string len = " [" + std::to_string(n) + "]";
    const Tensor a = values({n}, DType::Float32, 1), b = values({n}, DType::Float32, 2);
    const void* add32 = kernel_address(&bd::binary_vec_kernel<BinaryOp::Add, float>);
    check<BinaryOp::Add>("add float32" + len, a, operand(a, a), operand(b, a), DType::Float32, 2.5, 0, add32);
    check<BinaryOp::SoftplusBackward>("softplus backward float32" + len, a, operand(a, a), operand(b, a),
                                      DType::Float32, 2.0, 1.0,
                                      kernel_address(&bd::binary_vec_kernel<BinaryOp::SoftplusBackward, float>));
    check<BinaryOp::SiluBackward>("silu backward float32" + len, a, operand(a, a), operand(b, a), DType::Float32, 0, 0,
                                  kernel_address(&bd::binary_vec_kernel<BinaryOp::SiluBackward, float>));
    check<BinaryOp::Add>("add float32, scalar y" + len, a, operand(a, a), scalar(0.75), DType::Float32, -1.0, 0,
                         add32);
    check<BinaryOp::Add>("add float32, scalar x" + len, a, scalar(-3.25), operand(b, a), DType::Float32, 1.0, 0,
                         add32);
    // An int64 scalar past 2^53 rounds to float32 once, from the integer (the launch took the double).
    const Operand wide = ops::scalar_operand(Scalar((int64_t{1} << 60) + (int64_t{1} << 36) + 1));
    check<BinaryOp::Add>("add float32, a wide int64 scalar" + len, a, operand(a, a), wide, DType::Float32, 1.0, 0,
                         add32);
    check<BinaryOp::Add>("add float32, in place" + len, a.clone(), operand(a.clone(), a), operand(b, a),
                         DType::Float32, 1.0, 0, add32, true);
    const Tensor off = misaligned(a);
    check<BinaryOp::Add>("add float32, misaligned x" + len, a, operand(off, a), operand(b, a), DType::Float32, 1.0, 0,
                         add32);
    for (const DType t : {DType::Float16, DType::BFloat16}) {
      const Tensor h = a.to(t), g = b.to(t);
      const std::string name = std::string(dtype_name(t)) + len;
      with_float_storage(t, [&]<typename S>() {
        check<BinaryOp::Mul>("mul " + name, h, operand(h, h), operand(g, h), DType::Float32, 1.0, 0,
                             kernel_address(&bd::binary_vec_kernel<BinaryOp::Mul, S>));
        check<BinaryOp::Add>("add " + name + ", in place", h.clone(), operand(h.clone(), h), operand(g, h),
                             DType::Float32, 0.5, 0, kernel_address(&bd::binary_vec_kernel<BinaryOp::Add, S>), true);
        check<BinaryOp::Add>("add " + name + ", misaligned y", h, operand(h, h), operand(misaligned(g), h),
                             DType::Float32, 1.0, 0, kernel_address(&bd::binary_vec_kernel<BinaryOp::Add, S>));
      });
    }
  }
  // NaN on either side of maximum: the NaN wins.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = values({37}, DType::Float32, 3), y = values({37}, DType::Float32, 4);
  x.narrow(0, 5, 1).fill_(nan);
  y.narrow(0, 6, 1).fill_(nan);
  x.narrow(0, 33, 1).fill_(nan);
  y.narrow(0, 33, 1).fill_(nan);
  check<BinaryOp::Maximum>("maximum with NaN", x, operand(x, x), operand(y, x), DType::Float32, 0, 0,
                           kernel_address(&bd::binary_vec_kernel<BinaryOp::Maximum, float>));
  // Clamp's backward: the gradient passes where min <= input <= max (NaN: no bound).
  const Tensor grad = values({41}, DType::BFloat16, 5), in = values({41}, DType::BFloat16, 6);
  for (const auto& [lo, hi] : {std::pair{-1.0, 1.0}, std::pair{nan, 0.5}, std::pair{-0.5, nan}}) {
    check<BinaryOp::ClampBackward>("clamp backward", grad, operand(grad, grad), operand(in, grad), DType::Float32, lo,
                                   hi, kernel_address(&bd::binary_vec_kernel<BinaryOp::ClampBackward, BFloat16>));
  }
}

TEST_CASE("emulated: the mixed-dtype kernel of add and mul gives the CPU's bits", "[simt][elementwise]") {
  using F16 = cuda_detail::Float16Storage;
  using BF16 = cuda_detail::BFloat16Storage;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{16}, int64_t{1029}}) {
    const std::string len = " [" + std::to_string(n) + "]";
    const Tensor out = empty({n});
    const Tensor f32 = values({n}, DType::Float32, 7), bf = values({n}, DType::BFloat16, 8),
                 h = values({n}, DType::Float16, 9);
    check<BinaryOp::Add>("float32 + bfloat16" + len, out, operand(f32, out), operand(bf, out), DType::Float32, 1.0, 0,
                         kernel_address(&bd::binary_mixed_kernel<BinaryOp::Add, float, BF16>));
    check<BinaryOp::Add>("bfloat16 + float16" + len, out, operand(bf, out), operand(h, out), DType::Float32, 0.5, 0,
                         kernel_address(&bd::binary_mixed_kernel<BinaryOp::Add, BF16, F16>));
    check<BinaryOp::Mul>("scalar * float16" + len, out, scalar(1.5), operand(h, out), DType::Float32, 1.0, 0,
                         kernel_address(&bd::binary_mixed_kernel<BinaryOp::Mul, float, F16>));
    check<BinaryOp::Mul>("bfloat16 * float32, misaligned" + len, out, operand(misaligned(bf), out),
                         operand(f32, out), DType::Float32, 1.0, 0,
                         kernel_address(&bd::binary_mixed_kernel<BinaryOp::Mul, BF16, float>));
    // The residual add in place: out is the float32 operand.
    check<BinaryOp::Add>("float32 += bfloat16, in place" + len, f32.clone(), operand(f32.clone(), out),
                         operand(bf, out), DType::Float32, 1.0, 0,
                         kernel_address(&bd::binary_mixed_kernel<BinaryOp::Add, float, BF16>), true);
  }
}

TEST_CASE("emulated: the generic kernel of binary ops gives the CPU's bits", "[simt][elementwise]") {
  // A transposed operand into a contiguous [19, 37] output, and one into a transposed output.
  const Tensor out = empty({19, 37});
  const Tensor xt = values({37, 19}, DType::Float32, 10).t(), y = values({19, 37}, DType::Float32, 11);
  check<BinaryOp::Add>("add, transposed x", out, operand(xt, out), operand(y, out), DType::Float32, 2.0, 0,
                       kernel_address(&bd::binary_generic_kernel<BinaryOp::Add, float>));
  check<BinaryOp::Mul>("mul into a transposed output", empty({37, 19}).t(), operand(y, out), operand(xt, out),
                       DType::Float32, 1.0, 0, kernel_address(&bd::binary_generic_kernel<BinaryOp::Mul, float>));
  // A broadcast row and column (stride 0), 16-bit storage with float compute.
  const Tensor row = values({1, 37}, DType::BFloat16, 12), col = values({19, 1}, DType::Float16, 13);
  const Tensor out16 = empty({19, 37}, TensorOptions(DType::BFloat16));
  check<BinaryOp::Maximum>("maximum, broadcast", out16, operand(row, out16), operand(col, out16), DType::Float32, 0,
                           0, kernel_address(&bd::binary_generic_kernel<BinaryOp::Maximum, float>));
  // int64 and float64 compute.
  manual_seed(14);
  const Tensor i32 = randint(-50, 50, {5, 33}).to(DType::Int32), i64 = randint(-50, 50, {5, 33});
  const Tensor out_i = empty({5, 33}, TensorOptions(DType::Int64));
  check<BinaryOp::Add>("add, int32 + int64", out_i, operand(i32, out_i), operand(i64, out_i), DType::Int64, 3.0, 0,
                       kernel_address(&bd::binary_generic_kernel<BinaryOp::Add, int64_t>));
  const Tensor d = values({5, 33}, DType::Float64, 15);
  check<BinaryOp::Mul>("mul, float64", d, operand(d, d), operand(values({5, 33}, DType::Float64, 17), d),
                       DType::Float64, 1.0, 0, kernel_address(&bd::binary_generic_kernel<BinaryOp::Mul, double>));
  // A comparison of float32 operands writes bool: never the vector kernel.
  const Tensor a = values({300}, DType::Float32, 16);
  Tensor b = a.clone();
  b.narrow(0, 0, 150).fill_(0.0);
  const Tensor bools = empty({300}, TensorOptions(DType::Bool));
  check<BinaryOp::Eq>("eq into bool", bools, operand(a, bools), operand(b, bools), DType::Float32, 0, 0,
                      kernel_address(&bd::binary_generic_kernel<BinaryOp::Eq, float>));
  const Tensor digits = randint(0, 10, {300});
  check<BinaryOp::Eq>("eq, int64 compute", bools, operand(digits, bools), scalar(7), DType::Int64, 0, 0,
                      kernel_address(&bd::binary_generic_kernel<BinaryOp::Eq, int64_t>));
}

TEST_CASE("emulated: the unary kernels give the CPU's bits: vectors, casts and the generic kernel",
          "[simt][elementwise]") {
  using F16 = cuda_detail::Float16Storage;
  using BF16 = cuda_detail::BFloat16Storage;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1031}}) {
    const std::string len = " [" + std::to_string(n) + "]";
    const Tensor a = values({n}, DType::Float32, 20);
    check_unary<UnaryOp::Relu>("relu float32" + len, a, operand(a, a), DType::Float32, 0, 0,
                               kernel_address(&ud::unary_vec_kernel<UnaryOp::Relu, float>));
    check_unary<UnaryOp::Relu>("relu float32, in place" + len, a.clone(), operand(a.clone(), a), DType::Float32, 0, 0,
                               kernel_address(&ud::unary_vec_kernel<UnaryOp::Relu, float>), true);
    check_unary<UnaryOp::Relu>("relu float32, misaligned" + len, a, operand(misaligned(a), a), DType::Float32, 0, 0,
                               kernel_address(&ud::unary_vec_kernel<UnaryOp::Relu, float>));
    const Tensor h = a.to(DType::Float16), g = a.to(DType::BFloat16);
    check_unary<UnaryOp::GeluTanh>("gelu(tanh) float16" + len, h, operand(h, h), DType::Float32, 0, 0,
                                   kernel_address(&ud::unary_vec_kernel<UnaryOp::GeluTanh, F16>));
    // The activations with parameters: leaky_relu's slope, softplus's beta and threshold (both
    // branches: beta x passes 1 for some elements).
    check_unary<UnaryOp::Silu>("silu float32" + len, a, operand(a, a), DType::Float32, 0, 0,
                               kernel_address(&ud::unary_vec_kernel<UnaryOp::Silu, float>));
    check_unary<UnaryOp::LeakyRelu>("leaky_relu float16" + len, h, operand(h, h), DType::Float32, 0.1, 0,
                                    kernel_address(&ud::unary_vec_kernel<UnaryOp::LeakyRelu, F16>));
    check_unary<UnaryOp::Softplus>("softplus bfloat16" + len, g, operand(g, g), DType::Float32, 2.0, 1.0,
                                   kernel_address(&ud::unary_vec_kernel<UnaryOp::Softplus, BF16>));
    // A scalar input: a fill.
    check_unary<UnaryOp::Copy>("fill bfloat16" + len, g, scalar(-2.375), DType::Float32, 0, 0,
                               kernel_address(&ud::unary_vec_kernel<UnaryOp::Copy, BF16>));
    // Casts among the three float dtypes (autocast's), aligned and not.
    const Tensor out16 = empty({n}, TensorOptions(DType::Float16)), outbf = empty({n}, TensorOptions(DType::BFloat16));
    check_unary<UnaryOp::Copy>("float32 to bfloat16" + len, outbf, operand(a, outbf), DType::Float32, 0, 0,
                               kernel_address(&ud::cast_vec_kernel<float, BF16>));
    check_unary<UnaryOp::Copy>("bfloat16 to float32" + len, a, operand(g, a), DType::Float32, 0, 0,
                               kernel_address(&ud::cast_vec_kernel<BF16, float>));
    check_unary<UnaryOp::Copy>("float16 to bfloat16, misaligned" + len, outbf, operand(misaligned(h), outbf),
                               DType::Float32, 0, 0, kernel_address(&ud::cast_vec_kernel<F16, BF16>));
    check_unary<UnaryOp::Copy>("float32 to float16, misaligned" + len, out16, operand(misaligned(a), out16),
                               DType::Float32, 0, 0, kernel_address(&ud::cast_vec_kernel<float, F16>));
  }
  // The generic kernel: a transposed copy, a float64 op, an integer clamp with one bound missing
  // (NaN: the widest), and logical_not into bool.
  const Tensor out = empty({19, 37});
  const Tensor xt = values({37, 19}, DType::BFloat16, 21).t();
  check_unary<UnaryOp::Copy>("transposed bfloat16 to float32", out, operand(xt, out), DType::Float32, 0, 0,
                             kernel_address(&ud::unary_generic_kernel<UnaryOp::Copy, float>));
  const Tensor d = values({5, 33}, DType::Float64, 22);
  check_unary<UnaryOp::Tanh>("tanh float64", d, operand(d, d), DType::Float64, 0, 0,
                             kernel_address(&ud::unary_generic_kernel<UnaryOp::Tanh, double>));
  manual_seed(23);
  const Tensor ints = randint(-100, 100, {300});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check_unary<UnaryOp::Clamp>("clamp int64, no lower bound", ints, operand(ints, ints), DType::Int64, nan, 40.0,
                              kernel_address(&ud::unary_generic_kernel<UnaryOp::Clamp, int64_t>));
  check_unary<UnaryOp::Clamp>("clamp int64, no upper bound", ints, operand(ints, ints), DType::Int64, -7.0, nan,
                              kernel_address(&ud::unary_generic_kernel<UnaryOp::Clamp, int64_t>));
  const Tensor bools = empty({300}, TensorOptions(DType::Bool));
  check_unary<UnaryOp::LogicalNot>("logical_not", bools, operand(ints, bools), DType::Int64, 0, 0,
                                   kernel_address(&ud::unary_generic_kernel<UnaryOp::LogicalNot, int64_t>));
  // Floats to integers where a plain cast is undefined (NaN, inf, past int64): the CUDA source's
  // loads take kernels/half.h's rule as the CPU's do.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor wild = tensor(std::vector<double>{nan, inf, -inf, 1e19, -1e19, 0x1p63, 1e10, 300.7, -1.5});
  for (DType from : {DType::Float64, DType::Float32, DType::Float16}) {
    const Tensor src = wild.to(from);
    for (DType to : {DType::Int64, DType::Int32, DType::UInt8}) {
      const Tensor dst = empty({wild.numel()}, TensorOptions(to));
      check_unary<UnaryOp::Copy>(std::string(dtype_name(from)) + " to " + dtype_name(to), dst, operand(src, dst),
                                 ops::cast_compute_dtype(from, to), 0, 0,
                                 kernel_address(&ud::unary_generic_kernel<UnaryOp::Copy, int64_t>));
    }
  }
}

TEST_CASE("emulated: the uncommon math ops take the generic kernel and give the CPU's bits", "[simt][elementwise]") {
  // Dense float16 and float32 operands of the output's dtype, which the common ops would send to
  // the vector kernel: rounding (half to even), tan and erfc, atan2 and the rounding divisions and
  // remainders in float and int64 compute (negative operands, INT64_MIN by -1).
  const Tensor h = values({1031}, DType::Float16, 40), a = values({1031}, DType::Float32, 41);
  check_unary<UnaryOp::Round>("round float16", h, operand(h, h), DType::Float32, 0, 0,
                              kernel_address(&ud::unary_generic_kernel<UnaryOp::Round, float>));
  check_unary<UnaryOp::Floor>("floor float32", a, operand(a, a), DType::Float32, 0, 0,
                              kernel_address(&ud::unary_generic_kernel<UnaryOp::Floor, float>));
  check_unary<UnaryOp::Tan>("tan float32", a, operand(a, a), DType::Float32, 0, 0,
                            kernel_address(&ud::unary_generic_kernel<UnaryOp::Tan, float>));
  const Tensor d = values({5, 33}, DType::Float64, 42);
  check_unary<UnaryOp::Erfc>("erfc float64", d, operand(d, d), DType::Float64, 0, 0,
                             kernel_address(&ud::unary_generic_kernel<UnaryOp::Erfc, double>));
  const Tensor b = values({1031}, DType::Float32, 43);
  check<BinaryOp::Atan2>("atan2 float32", a, operand(a, a), operand(b, a), DType::Float32, 0, 0,
                         kernel_address(&bd::binary_generic_kernel<BinaryOp::Atan2, float>));
  check<BinaryOp::FloorDivide>("floor_divide float32", a, operand(a, a), operand(b, a), DType::Float32, 0, 0,
                               kernel_address(&bd::binary_generic_kernel<BinaryOp::FloorDivide, float>));
  check<BinaryOp::Remainder>("remainder float16, scalar divisor", h, operand(h, h), scalar(-0.75), DType::Float32, 0, 0,
                             kernel_address(&bd::binary_generic_kernel<BinaryOp::Remainder, float>));
  manual_seed(44);
  Tensor ints = randint(-1000, 1000, {300});
  ints.narrow(0, 0, 1).fill_(std::numeric_limits<int64_t>::min());
  Tensor divisors = randint(1, 9, {300}) * (randint(0, 2, {300}) * 2 - 1);
  divisors.narrow(0, 0, 1).fill_(-1);
  for (const Tensor& t : {ints, divisors}) REQUIRE(t.dtype() == DType::Int64);
  check<BinaryOp::FloorDivide>("floor_divide int64", ints, operand(ints, ints), operand(divisors, ints), DType::Int64,
                               0, 0, kernel_address(&bd::binary_generic_kernel<BinaryOp::FloorDivide, int64_t>));
  check<BinaryOp::Remainder>("remainder int64", ints, operand(ints, ints), operand(divisors, ints), DType::Int64, 0, 0,
                             kernel_address(&bd::binary_generic_kernel<BinaryOp::Remainder, int64_t>));
  check<BinaryOp::Fmod>("fmod int64", ints, operand(ints, ints), operand(divisors, ints), DType::Int64, 0, 0,
                        kernel_address(&bd::binary_generic_kernel<BinaryOp::Fmod, int64_t>));
  check<BinaryOp::TruncDivide>("trunc divide int64", ints, operand(ints, ints), operand(divisors, ints), DType::Int64,
                               0, 0, kernel_address(&bd::binary_generic_kernel<BinaryOp::TruncDivide, int64_t>));
}

TEST_CASE("emulated: the where kernel gives the CPU's bits", "[simt][elementwise]") {
  // cond broadcast along rows, x transposed, y a scalar or a broadcast column.
  const Tensor out = empty({19, 37});
  manual_seed(30);
  const Tensor cond = randint(0, 2, {1, 37}).to(DType::Bool);
  const Tensor xt = values({37, 19}, DType::BFloat16, 31).t(), col = values({19, 1}, DType::Float32, 32);
  const StridedArg cond_arg = ops::make_arg("test", cond, out.sizes());
  const void* kernel = kernel_address(&wd::where_kernel<float>);
  check_where("broadcast y", out, cond_arg, operand(xt, out), operand(col, out), DType::Float32, kernel);
  check_where("scalar y", out, cond_arg, operand(xt, out), scalar(-1.5), DType::Float32, kernel);
  // int64 compute with a uint8 condition.
  const Tensor ints = randint(-9, 9, {300}), other = randint(100, 200, {300});
  const Tensor mask = randint(0, 3, {300}).to(DType::UInt8);
  check_where("uint8 condition, int64", ints, ops::make_arg("test", mask), operand(ints, ints), operand(other, ints),
              DType::Int64, kernel_address(&wd::where_kernel<int64_t>));
}
