// The binary elementwise kernels of kernels/cuda/elementwise_binary.cuh, their real source, run on
// the CPU through the emulator of CUDA's threads (kernels/simt/simt.h), picked and launched by
// binary_dispatch itself, and compared bit for bit with binary_cpu (both compute through
// kernels/elementwise_math.h). The cases reach each kernel, and the test asserts which one ran:
// the vector kernel for dense operands of the output's float dtype (whole 16-byte vectors and a
// tail, lengths around the vector's, an operand one element off 16-byte alignment so that
// everything is tail, scalars on either side, and out == x in place), the mixed kernel for a
// float32 output of add or mul from float16, bfloat16 and float32 operands (eight elements a step),
// and the generic kernel through offsets (transposed and broadcast operands, int64 and float64
// compute, comparisons into bool). Maximum sees NaN on both sides, and clamp's backward its bounds.
// Each case runs in binary_dispatch's grid and in a grid capped at 3 blocks; the output lies
// between guard bands.
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
#include "kernels/elementwise.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace bd = kiln::binary_device;

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

// Runs OP into an output shaped and strided like `out_like` (over dense storage) on the CPU and on
// the emulator, compares the bytes, and checks that the emulator ran `kernel`. in_place: x is the
// output (its bytes are copied into the emulator's output first, and x reads from there).
template <BinaryOp OP>
void check(const std::string& what, const Tensor& out_like, Operand x, Operand y, DType compute, double alpha,
           double beta, const void* kernel, bool in_place = false) {
  const StridedArg out_arg = ops::make_arg(out_like);
  const size_t bytes = static_cast<size_t>(out_like.numel()) * out_like.element_size();
  const KernelContext cpu{};
  std::vector<unsigned char> want(bytes);
  if (in_place) std::memcpy(want.data(), out_like.data_ptr(), bytes);
  StridedArg cpu_out = out_arg;
  cpu_out.data = want.data();
  Operand cpu_x = x;
  if (in_place) cpu_x.arg.data = want.data();
  binary_cpu(cpu_out, cpu_x, y, OP, compute, alpha, beta, cpu);
  for (const unsigned grid_cap : {~0u, 3u}) {
    INFO(what << ", grid cap " << grid_cap);
    Guarded<unsigned char> emu(static_cast<int64_t>(bytes));
    if (in_place) std::memcpy(emu.data(), out_like.data_ptr(), bytes);
    StridedArg emu_out = out_arg;
    emu_out.data = emu.data();
    Operand emu_x = x;
    if (in_place) emu_x.arg.data = emu.data();
    std::vector<const void*> kernels;
    const EmulatedLaunch launch{simt::Schedule::Lowest, grid_cap, &kernels};
    bd::binary_dispatch<OP>(emu_out, emu_x, y, compute, alpha, beta, launch);
    CHECK(kernels == std::vector<const void*>{kernel});
    CHECK(emu.bands_intact());
    CHECK(std::memcmp(emu.data(), want.data(), bytes) == 0);
  }
}

Operand operand(const Tensor& t, const Tensor& out) { return ops::make_operand(t, out.sizes()); }
Operand scalar(double v) { return ops::scalar_operand(Scalar(v)); }

}  // namespace

TEST_CASE("emulated: the vector kernel of binary ops gives the CPU's bits", "[simt][elementwise]") {
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{9}, int64_t{1027}}) {
    const std::string len = " [" + std::to_string(n) + "]";
    const Tensor a = values({n}, DType::Float32, 1), b = values({n}, DType::Float32, 2);
    const void* add32 = kernel_address(&bd::binary_vec_kernel<BinaryOp::Add, float>);
    check<BinaryOp::Add>("add float32" + len, a, operand(a, a), operand(b, a), DType::Float32, 2.5, 0, add32);
    check<BinaryOp::Add>("add float32, scalar y" + len, a, operand(a, a), scalar(0.75), DType::Float32, -1.0, 0,
                         add32);
    check<BinaryOp::Add>("add float32, scalar x" + len, a, scalar(-3.25), operand(b, a), DType::Float32, 1.0, 0,
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
