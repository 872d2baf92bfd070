// augment_images: a batch of uint8 images through one fused kernel (crop, flip, colour jitter,
// normalization, cast), with image i's parameters drawn from Philox (seed, offset, i) of one
// generator draw, so the CPU twin reproduces the GPU's every image (kernels/augment.h,
// docs/augmentation.md). uint8 input has no gradient: the op records no autograd node.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/augment.h"

namespace kiln {

// images: uint8 [B, H, W, C] (spec.input_layout HWC) or [B, C, H, W] (CHW), dense, with spec's
// channels, height and width. Returns [B, C, out_height, out_width] in spec.out_dtype, NCHW memory
// or channels-last (NHWC) memory, on images' device. One draw of `generator` (see core/random.h)
// per call; a ShapeError, DTypeError or Error naming augment_images and the values on bad input.
Tensor augment_images(const Tensor& images, const AugmentSpec& spec,
                      const std::optional<Generator>& generator = std::nullopt);

// The same pipeline with each image's parameters given (params.size() == B): a direct crop's box
// must be out_height x out_width (it may reach past the input: those pixels read `fill`), a
// bilinear one must lie inside the input; factors must be finite and >= 0. No random draw.
Tensor augment_images_with_params(const Tensor& images, const AugmentSpec& spec,
                                  const std::vector<AugmentParams>& params);

// The parameters augment_images gives images 0..batch-1 of a call whose draw was `state`.
std::vector<AugmentParams> augment_params(const AugmentSpec& spec, PhiloxState state, int64_t batch);

// Checks a spec on its own (sizes, ranges, dtype); an Error naming `op` and the bad value.
void check_augment_spec(const char* op, const AugmentSpec& spec);

}  // namespace kiln
