// Ops that join and split tensors along a dim, and that rearrange or extend them (flip, roll,
// repeat, pad: index_select and cat underneath, so their gradients are those ops').
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln {

Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be shorter); views of x. An empty dim splits into
// one empty piece, whatever split_size (0 included, as PyTorch's).
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim = 0);
// `chunks` pieces as equal as possible (PyTorch's rule: ceil(size / chunks) each).
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// x reversed along each of `dims` (each named once; none: a copy).
Tensor flip(const Tensor& x, const Shape& dims);
// x shifted by shifts[i] along dims[i], elements pushed past the end coming back at the start
// (negative shifts go the other way). With no dims, one shift of x flattened, reshaped back
// (torch.roll's rule).
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});
// x tiled repeats[i] times along dim i (torch.Tensor.repeat): repeats names at least x.dim() dims,
// the extra leading ones new dims; each >= 0.
Tensor repeat(const Tensor& x, const Shape& repeats);

// Sub-pixel rearrangements (Shi et al.'s ESPCN upsampling, and the inverse), reshapes and one
// permute: pixel_shuffle moves [*, C r^2, H, W] to [*, C, H r, W r], output pixel (h, w) of channel
// c reading channel c r^2 + (h mod r) r + (w mod r) at (h / r, w / r); pixel_unshuffle is its
// inverse (H and W divisible by r). r >= 1.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// ShuffleNet's channel shuffle of x [N, C, *]: the channels seen as [groups, C / groups],
// transposed.
Tensor channel_shuffle(const Tensor& x, int64_t groups);

// How pad fills: with `value`, the edge reflected without repeating it (d c b | a b c d | c b a),
// the edge repeated (a a | a b c d | d d), or the far side wrapped round (c d | a b c d | a b).
enum class PadMode : uint8_t { Constant, Reflect, Replicate, Circular };
// torch.nn.functional.pad: `pads` holds (before, after) pairs, the last dim's first, for as many
// trailing dims as pairs. Constant padding may be negative (a crop); the other modes need pads
// >= 0, Reflect smaller than the dim, Circular at most the dim, Replicate a non-empty dim.
Tensor pad(const Tensor& x, const Shape& pads, PadMode mode = PadMode::Constant, double value = 0.0);

}  // namespace kiln
