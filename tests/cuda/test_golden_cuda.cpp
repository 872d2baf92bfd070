// The PyTorch golden runs (tests/golden/, float64 on the CPU) replayed on CUDA in float32 with TF32
// off, held to the float32 tolerances of tests/nn/golden_replay.h (the same the CPU's float32 replay
// meets): the whole training step of a GPT (embedding, layer_norm, attention, GELU MLP, tied head,
// cross_entropy) and of a CNN (cuDNN convolutions, batch_norm in training mode, max pooling),
// backward and AdamW included. KILN_GOLDEN_VERBOSE=1 prints the errors seen; KILN_GOLDEN_DIR
// points at tests/golden when the tests run away from the source tree.
#include "tests/nn/golden_replay.h"

#include <catch2/catch.hpp>

#include "core/cuda/runtime.h"

using namespace kiln;
using namespace kiln::golden_test;

namespace {

// TF32 rounds matmul and convolution inputs to 10 mantissa bits (~5e-4): the float32 tolerances
// assume full float32 products, so both switches are off for the replay and restored after.
struct NoTF32 {
  cuda::MathSwitches saved = cuda::math_switches();
  NoTF32() {
    cuda::math_switches().allow_tf32_matmul = false;
    cuda::math_switches().allow_tf32_cudnn = false;
  }
  ~NoTF32() { cuda::math_switches() = saved; }
};

}  // namespace

TEST_CASE("cuda golden: the tiny GPT in float32 on CUDA follows PyTorch's float64 recording", "[cuda][golden]") {
  REQUIRE(cuda::is_available());
  NoTF32 no_tf32;
  replay_gpt(float32_on(Device::cuda(0)), "gpt float32 cuda");
}

TEST_CASE("cuda golden: the narrow SmallCNN in float32 on CUDA follows PyTorch's float64 recording",
          "[cuda][golden]") {
  REQUIRE(cuda::is_available());
  NoTF32 no_tf32;
  replay_small_cnn(float32_on(Device::cuda(0)), "small_cnn float32 cuda");
}
