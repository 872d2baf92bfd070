// augment's CUDA kernel (kernels/cuda/augment.cuh), its real source, run on the CPU through the
// emulator of CUDA's threads (kernels/simt/simt.h), one block per image as kernels/cuda/augment.cu
// launches it, and compared bit for bit with the CPU kernel. Both share the per-pixel arithmetic
// (kernels/augment.h); what the emulator checks is the kernel's own structure: thread 0 derives an
// image's parameters into shared memory for the others, the block sums the grays for contrast's
// mean, every thread writes whole pixels through the output strides, and the block loops over
// images when the batch exceeds the grid (the shared parameters are rewritten for each). The specs
// cover every crop, CHW and HWC inputs, one to four channels, NCHW and NHWC outputs in float32,
// float16 and bfloat16, flips and colour jitter with and without contrast, and parameters given by
// the caller instead of drawn. Each case runs under both schedules, in one block per image and in
// a grid of 2 blocks; the output lies between guard bands.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "kernels/augment.h"
#include "kernels/cuda/augment.cuh"
#include "kernels/philox.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace ad = kiln::augment_device;

namespace {

AugmentSpec spec_of(int64_t c, int64_t h, int64_t w, AugmentCrop crop, int64_t oh, int64_t ow) {
  AugmentSpec s;
  s.channels = c;
  s.height = h;
  s.width = w;
  s.crop = crop;
  s.out_height = oh;
  s.out_width = ow;
  s.flip_p = 0.5;
  s.brightness = 0.4;
  s.saturation = 0.3;
  for (int64_t i = 0; i < c; ++i) {
    s.mean[i] = 0.1 * static_cast<double>(i + 1);
    s.std[i] = 0.2 + 0.1 * static_cast<double>(i);
  }
  return s;
}

struct Case {
  std::string name;
  AugmentSpec spec;
  int64_t batch;
  bool given_params = false;
};

// Images of noise from Philox, so that every pixel differs.
std::vector<uint8_t> images(int64_t bytes, uint64_t salt) {
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(philox_block(salt, 0, i).v[1] >> 24);
  return v;
}

}  // namespace

TEST_CASE("emulated: augment's CUDA kernel gives the CPU's bits for every crop, layout and dtype",
          "[simt][augment]") {
  std::vector<Case> cases;
  cases.push_back({"none, 3 channels", spec_of(3, 9, 11, AugmentCrop::None, 9, 11), 5});
  {
    AugmentSpec s = spec_of(3, 12, 10, AugmentCrop::PadCrop, 12, 10);
    s.padding = 3;
    s.fill = 200;
    s.contrast = 0.5;
    cases.push_back({"pad-crop with contrast", s, 5});
    s.input_layout = ImageLayout::HWC;
    s.out_layout = AugmentOutputLayout::NHWC;
    cases.push_back({"pad-crop, HWC in, NHWC out", s, 3});
  }
  {
    AugmentSpec s = spec_of(3, 16, 13, AugmentCrop::ResizedCrop, 8, 9);
    s.contrast = 0.4;
    s.out_dtype = DType::BFloat16;
    cases.push_back({"resized crop, bfloat16 out", s, 6});
    s.out_layout = AugmentOutputLayout::NHWC;
    s.out_dtype = DType::Float16;
    cases.push_back({"resized crop, NHWC float16 out", s, 4});
  }
  {
    AugmentSpec s = spec_of(1, 28, 28, AugmentCrop::PadCrop, 28, 28);
    s.padding = 4;
    s.contrast = 0.3;  // gray: contrast's mean is the pixel itself
    cases.push_back({"one channel, 28x28", s, 3});
  }
  {
    AugmentSpec s = spec_of(2, 7, 8, AugmentCrop::Center, 5, 6);
    s.contrast = 0.6;
    cases.push_back({"gray and alpha, center crop", s, 4});
  }
  {
    AugmentSpec s = spec_of(4, 6, 7, AugmentCrop::Resize, 10, 5);
    s.contrast = 0.2;
    s.input_layout = ImageLayout::HWC;
    cases.push_back({"RGBA, resize", s, 3});
  }
  {
    // More pixels than the block has threads, so each thread writes several and sums several.
    AugmentSpec s = spec_of(3, 24, 20, AugmentCrop::ResizedCrop, 20, 18);
    s.contrast = 0.4;
    cases.push_back({"resized crop, 360 pixels", s, 3});
    cases.push_back({"resized crop, given parameters", s, 3, true});
  }

  for (const Case& c : cases) {
    const AugmentSpec& s = c.spec;
    const AugmentPlan plan = augment_plan(s);
    const int64_t in_bytes = c.batch * plan.in_image;
    const std::vector<uint8_t> in = images(in_bytes, static_cast<uint64_t>(in_bytes));
    const PhiloxState philox{0xabcdef12ULL, 11, nullptr};
    std::vector<AugmentParams> given;
    if (c.given_params) {
      for (int64_t i = 0; i < c.batch; ++i) {
        AugmentParams q = augment_image_params(plan, PhiloxState{99, static_cast<uint64_t>(i), nullptr}, 0);
        q.flip = static_cast<int32_t>(i % 2);
        given.push_back(q);
      }
    }
    const AugmentParams* params = c.given_params ? given.data() : nullptr;
    const int64_t out_elems = c.batch * plan.out_image;
    const size_t out_bytes = static_cast<size_t>(out_elems) * element_size(s.out_dtype);
    std::vector<unsigned char> want(out_bytes);
    augment_cpu(want.data(), in.data(), c.batch, s, philox, params, KernelContext{});

    const simt::Schedule schedules[] = {simt::Schedule::Lowest, simt::Schedule::Highest};
    for (const simt::Schedule schedule : schedules) {
      for (const unsigned grid_cap : {~0u, 2u}) {
        INFO(c.name << ", " << c.batch << " images, " << (schedule == simt::Schedule::Lowest ? "lowest" : "highest")
                    << " first, grid cap " << grid_cap);
        Guarded<unsigned char> out(static_cast<int64_t>(out_bytes));
        simt::LaunchConfig config;
        config.grid.x = std::min(ad::augment_blocks(c.batch), grid_cap);
        config.block.x = ad::kAugmentThreads;
        config.schedule = schedule;
        const simt::LaunchStats stats =
            simt::launch(config, [&] { ad::augment_kernel(out.data(), in.data(), c.batch, plan, philox, params); });
        // A barrier after the parameters, one after the mean and two in its block sum when
        // contrast is jittered, and one before the next image.
        const int64_t per_image = s.contrast != 0.0 ? 5 : 2;
        CHECK(stats.block_barriers == per_image * c.batch);
        CHECK(out.bands_intact());
        CHECK(std::memcmp(out.data(), want.data(), out_bytes) == 0);
      }
    }
  }
}
