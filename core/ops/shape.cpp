// Joining and splitting: cat/stack copy into slices of one output; split/chunk are views. flip,
// roll and the non-constant pads gather with index_select along each dim (an index built on the
// host), repeat is an expand copied, constant pad a cat with filled slabs.
#include "core/ops/shape.h"

#include <algorithm>
#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "kernels/error.h"

namespace kiln {

Tensor cat(const TensorList& tensors, int64_t dim) {
  if (tensors.empty()) throw Error("cat: expects a non-empty list of tensors");
  std::vector<const Tensor*> ptrs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) throw Error("cat: tensor " + std::to_string(i) + " is undefined");
    ptrs.push_back(&tensors[i]);
  }
  Device dev = ops::common_device("cat", ptrs);
  // Legacy rule as in PyTorch: 1-d empty tensors are skipped.
  const Tensor* ref = nullptr;
  for (const Tensor& t : tensors)
    if (!(t.dim() == 1 && t.numel() == 0)) {
      ref = &t;
      break;
    }
  if (!ref) ref = &tensors[0];
  if (ref->dim() == 0) throw ShapeError("cat: zero-dimensional tensors cannot be concatenated; use stack");
  int64_t d = wrap_dim(dim, ref->dim(), "cat");
  DType rt = tensors[0].dtype();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    rt = promote_types(rt, t.dtype());
    if (t.dim() == 1 && t.numel() == 0) continue;
    if (t.dim() != ref->dim()) {
      throw ShapeError("cat: tensor " + std::to_string(i) + " has " + std::to_string(t.dim()) + " dims, expected " +
                       std::to_string(ref->dim()) + " (shapes " + shape_str(ref->sizes()) + " and " +
                       shape_str(t.sizes()) + ")");
    }
    for (int64_t k = 0; k < t.dim(); ++k) {
      if (k != d && t.size(k) != ref->size(k)) {
        throw ShapeError("cat: sizes must match except in dimension " + std::to_string(d) + "; tensor " +
                         std::to_string(i) + " has shape " + shape_str(t.sizes()) + ", expected " +
                         shape_str(ref->sizes()) + " apart from that dimension");
      }
    }
    if (__builtin_add_overflow(total, t.size(d), &total)) {
      throw ShapeError("cat: the sizes along dimension " + std::to_string(d) + " add up past int64 (tensor " +
                       std::to_string(i) + " of shape " + shape_str(t.sizes()) + ")");
    }
  }
  Shape out_shape = ref->sizes();
  out_shape[static_cast<size_t>(d)] = total;
  Tensor out = ops::empty_for("cat", out_shape, TensorOptions(rt, dev));
  Shape lengths;
  int64_t off = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) {
      lengths.push_back(-1);
      continue;
    }
    ops::copy_raw(out.narrow(d, off, t.size(d)), t, "cat");
    lengths.push_back(t.size(d));
    off += t.size(d);
  }
  if (needs_grad(tensors)) {
    record_function("cat", tensors, {out}, {}, [lengths, d](const FunctionNode::Context& ctx) {
      TensorList r(lengths.size());
      int64_t o = 0;
      for (size_t i = 0; i < lengths.size(); ++i) {
        if (lengths[i] < 0) {  // a skipped [0] input: its gradient is empty too, as in PyTorch
          if (ctx.needs_input_grad[i]) r[i] = empty({0}, TensorOptions(ctx.grads[0].dtype(), ctx.grads[0].device()));
          continue;
        }
        if (ctx.needs_input_grad[i]) r[i] = ctx.grads[0].narrow(d, o, lengths[i]);
        o += lengths[i];
      }
      return r;
    });
  }
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  if (tensors.empty()) throw Error("stack: expects a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) throw Error("stack: tensor " + std::to_string(i) + " is undefined");
    if (tensors[i].sizes() != tensors[0].sizes()) {
      throw ShapeError("stack: all tensors must have one shape; tensor 0 is " + shape_str(tensors[0].sizes()) +
                       ", tensor " + std::to_string(i) + " is " + shape_str(tensors[i].sizes()));
    }
  }
  int64_t d = wrap_insert_dim(dim, tensors[0].dim(), "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

namespace {

// The tensor of shape xs whose pieces along d (of `sizes`) are exactly `pieces`, when they already
// sit in one storage that way, with one set of strides and dense together: a view of that storage,
// so split's backward need not copy them. scaled_dot_product_attention writes a fused qkv
// projection's three gradients like this. Undefined otherwise. The result aliases the pieces'
// gradients, as the copy did not: the engine only adds gradients out of place and AccumulateGrad
// copies a view, so nothing writes through it, but a hook that edits x's gradient in place would
// also change the pieces' (hooks should return a new tensor, as PyTorch's advise).
Tensor joined_pieces(const TensorList& pieces, const Shape& xs, const Shape& sizes, int64_t d) {
  // Pieces without elements have no place to check (the engine may have made them anywhere).
  if (shape_numel(xs) == 0 || std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return Tensor();
  const Tensor& first = pieces[0];
  Shape strides = first.strides();
  // A piece of size 1 along d may carry any stride there: take d's stride from one that spans more.
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (sizes[i] > 1) strides[static_cast<size_t>(d)] = pieces[i].stride(d);
  }
  if (!non_overlapping_and_dense(xs, strides)) return Tensor();
  int64_t off = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor& p = pieces[i];
    if (p.storage() != first.storage() || p.dtype() != first.dtype()) return Tensor();
    if (p.storage_offset() != first.storage_offset() + off * strides[static_cast<size_t>(d)]) return Tensor();
    for (int64_t k = 0; k < p.dim(); ++k) {
      if (p.size(k) > 1 && p.stride(k) != strides[static_cast<size_t>(k)]) return Tensor();
    }
    off += sizes[i];
  }
  return ops::make_view("split backward", first, xs, strides, first.storage_offset());
}

}  // namespace

TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim) {
  ops::check_defined("split", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ShapeError("split: negative size in " + shape_str(sizes));
    // Checked: a sum that wrapped around could match the dim and split past its end.
    if (__builtin_add_overflow(total, s, &total)) {
      throw ShapeError("split: sizes " + shape_str(sizes) + " add up past int64 (dimension " + std::to_string(d) +
                       " has size " + std::to_string(x.size(d)) + ")");
    }
  }
  if (total != x.size(d)) {
    throw ShapeError("split: sizes " + shape_str(sizes) + " sum to " + std::to_string(total) + ", but dimension " +
                     std::to_string(d) + " has size " + std::to_string(x.size(d)) + " (shape " + shape_str(x.sizes()) +
                     ")");
  }
  TensorList out;
  {
    // The pieces are narrow's views, with one node for all of them below instead of a slice node
    // each: a slice's backward fills a zero tensor of x's shape around its piece, and the engine
    // then adds those tensors, where the split's backward copies every piece's gradient into its
    // part of one tensor (a GPT's qkv gradient: one write instead of three zero fills, three
    // copies and two adds of [B, T, 3C]).
    NoGradGuard views_only;
    int64_t off = 0;
    for (int64_t s : sizes) {
      out.push_back(x.narrow(d, off, s));
      off += s;
    }
  }
  for (const Tensor& piece : out) ops::set_view_origin(piece, x);  // views as grad mode would make them
  if (!out.empty() && needs_grad({&x})) {
    record_function("split", {x}, out, {}, [xs = x.sizes(), sizes, d](const FunctionNode::Context& ctx) {
      // The engine gives every piece a gradient (zeros for one that got none), all of x's dtype.
      if (Tensor whole = joined_pieces(ctx.grads, xs, sizes, d); whole.defined()) return TensorList{whole};
      Tensor g = empty(xs, TensorOptions(ctx.grads[0].dtype(), ctx.grads[0].device()));
      int64_t off = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        ops::copy_raw(g.narrow(d, off, sizes[i]), ctx.grads[i]);
        off += sizes[i];
      }
      return TensorList{g};
    });
  }
  return out;
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  ops::check_defined("split", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t n = x.size(d);
  // 0 splits an empty dim into one empty piece, as PyTorch's; anything else must be positive.
  if (split_size < 0 || (split_size == 0 && n != 0)) {
    throw Error("split: split_size must be positive (or 0 for an empty dim), got " + std::to_string(split_size) +
                " for dim " + std::to_string(d) + " of size " + std::to_string(n) + " (shape " + shape_str(x.sizes()) +
                ")");
  }
  if (split_size == 0) return split_with_sizes(x, {0}, d);
  Shape sizes;
  for (int64_t off = 0; off < n; off += split_size) sizes.push_back(std::min(split_size, n - off));
  if (sizes.empty()) sizes.push_back(0);
  return split_with_sizes(x, sizes, d);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  ops::check_defined("chunk", x, "input");
  if (chunks <= 0) throw Error("chunk: chunks must be positive, got " + std::to_string(chunks));
  int64_t d = wrap_dim(dim, x.dim(), "chunk");
  int64_t n = x.size(d);
  // An empty dim: `chunks` empty pieces, as PyTorch gives (a split of it would give one); so many
  // that their handles would not fit in memory are refused.
  if (n == 0) {
    constexpr int64_t kMaxEmptyPieces = int64_t{1} << 24;
    if (chunks > kMaxEmptyPieces) {
      throw Error("chunk: " + std::to_string(chunks) + " chunks of an empty dim (shape " + shape_str(x.sizes()) +
                  ") would be as many empty tensors; at most " + std::to_string(kMaxEmptyPieces));
    }
    return split_with_sizes(x, Shape(static_cast<size_t>(chunks), 0), d);
  }
  const int64_t each = (n - 1) / chunks + 1;  // ceil(n / chunks); n + chunks - 1 may overflow
  return split(x, each, d);
}

// --- flip, roll, repeat, pad -------------------------------------------------------------------

namespace {

// dims wrapped into [0, x.dim()), each once; an Error naming op and the dims otherwise.
std::vector<int64_t> distinct_dims(const char* op, const Tensor& x, const Shape& dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim(), op);
    if (std::find(out.begin(), out.end(), w) != out.end()) {
      throw Error(std::string(op) + ": dim " + std::to_string(w) + " appears more than once in " + shape_str(dims) +
                  " (input " + shape_str(x.sizes()) + ")");
    }
    out.push_back(w);
  }
  return out;
}

}  // namespace

Tensor flip(const Tensor& x, const Shape& dims) {
  const char* op = "flip";
  ops::check_defined(op, x, "input");
  Tensor y = x;
  for (int64_t d : distinct_dims(op, x, dims)) {
    std::vector<int64_t> index(static_cast<size_t>(x.size(d)));
    for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(index.size() - 1 - i);
    y = index_select(y, d, ops::index_on(index, x.device()));
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  const char* op = "roll";
  ops::check_defined(op, x, "input");
  if (dims.empty()) {
    if (shifts.size() != 1) {
      throw Error("roll: without dims, one shift (of x flattened) is expected, got " + shape_str(shifts));
    }
    return roll(x.flatten(), shifts, {0}).reshape(x.sizes());
  }
  if (shifts.size() != dims.size()) {
    throw Error("roll: " + std::to_string(shifts.size()) + " shifts for " + std::to_string(dims.size()) + " dims (" +
                shape_str(shifts) + " and " + shape_str(dims) + ")");
  }
  Tensor y = x;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = wrap_dim(dims[k], x.dim(), op), n = x.size(d);
    if (n == 0) continue;
    const int64_t shift = ((shifts[k] % n) + n) % n;
    // out[i] = x[(i - shift) mod n]
    std::vector<int64_t> index(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) index[static_cast<size_t>(i)] = (i - shift + n) % n;
    y = index_select(y, d, ops::index_on(index, x.device()));
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  const char* op = "repeat";
  ops::check_defined(op, x, "input");
  const int64_t extra = static_cast<int64_t>(repeats.size()) - x.dim();
  if (extra < 0) {
    throw ShapeError("repeat: " + std::to_string(repeats.size()) + " repeats for a " + std::to_string(x.dim()) +
                     "-d input " + shape_str(x.sizes()) + " (at least one per dim)");
  }
  for (int64_t r : repeats) {
    if (r < 0) throw Error("repeat: repeats must be >= 0, got " + shape_str(repeats));
  }
  // x viewed as [1, s0, 1, s1, ...] (leading new dims of size 1), expanded to [r0, s0, r1, s1, ...]
  // and merged pairwise: each dim tiled.
  Shape paired, expanded, merged;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t s = static_cast<int64_t>(i) < extra ? 1 : x.size(static_cast<int64_t>(i) - extra);
    paired.insert(paired.end(), {1, s});
    expanded.insert(expanded.end(), {repeats[i], s});
    merged.push_back(checked_mul(repeats[i], s, op, "the output size"));
  }
  // Copied even where every repeat is 1 (then the expand is x itself): repeat never aliases x.
  const Tensor tiled = x.reshape(paired).expand(expanded);
  return (tiled.is_contiguous() ? tiled.clone() : tiled.contiguous()).reshape(merged);
}

Tensor pad(const Tensor& x, const Shape& pads, PadMode mode, double value) {
  const char* op = "pad";
  ops::check_defined(op, x, "input");
  const int64_t pairs = static_cast<int64_t>(pads.size()) / 2;
  if (pads.size() % 2 != 0 || pairs > x.dim()) {
    throw ShapeError("pad: pads must hold (before, after) pairs for at most the input's " + std::to_string(x.dim()) +
                     " dims, got " + shape_str(pads) + " (input " + shape_str(x.sizes()) + ")");
  }
  Tensor y = x;
  for (int64_t k = 0; k < pairs; ++k) {
    const int64_t d = x.dim() - 1 - k, n = x.size(d);
    const int64_t before = pads[static_cast<size_t>(2 * k)], after = pads[static_cast<size_t>(2 * k + 1)];
    const std::string where = " (dim " + std::to_string(d) + " of size " + std::to_string(n) + ", pads " +
                              shape_str(pads) + ", input " + shape_str(x.sizes()) + ")";
    if (mode == PadMode::Constant) {
      if (n + before + after < 0 || (before < 0 && -before > n) || (after < 0 && -after > n)) {
        throw ShapeError("pad: negative padding crops more than the dim holds" + where);
      }
      // Crops first (a copy, not a view of x), then the filled slabs on either side.
      if (before < 0 || after < 0) {
        const int64_t start = std::max<int64_t>(0, -before);
        y = y.narrow(d, start, n - start - std::max<int64_t>(0, -after)).clone();
      }
      TensorList parts;
      Shape slab = y.sizes();
      if (before > 0) {
        slab[static_cast<size_t>(d)] = before;
        parts.push_back(full(slab, value, TensorOptions(x.dtype(), x.device())));
      }
      parts.push_back(y);
      if (after > 0) {
        slab[static_cast<size_t>(d)] = after;
        parts.push_back(full(slab, value, TensorOptions(x.dtype(), x.device())));
      }
      if (parts.size() > 1) y = cat(parts, d);
      continue;
    }
    if (before < 0 || after < 0) throw Error("pad: only constant padding may be negative" + where);
    if (mode == PadMode::Reflect && ((before > 0 && before >= n) || (after > 0 && after >= n))) {
      throw ShapeError("pad: reflect padding must be smaller than the dim" + where);
    }
    if (mode == PadMode::Circular && (before > n || after > n)) {
      throw ShapeError("pad: circular padding must be at most the dim" + where);
    }
    if (mode == PadMode::Replicate && n == 0 && before + after > 0) {
      throw ShapeError("pad: replicate padding needs a non-empty dim" + where);
    }
    // Each output position reads one input position along d.
    std::vector<int64_t> index;
    for (int64_t i = -before; i < n + after; ++i) {
      int64_t j = i;
      if (mode == PadMode::Reflect) j = i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
      if (mode == PadMode::Replicate) j = std::clamp<int64_t>(i, 0, n - 1);
      if (mode == PadMode::Circular) j = ((i % n) + n) % n;
      index.push_back(j);
    }
    y = index_select(y, d, ops::index_on(index, x.device()));
  }
  return y.is_same(x) ? x.clone() : y;
}

namespace {

// x [*, C, H, W] (at least 3-d) and a factor >= 1, for the pixel shuffles.
void check_pixel_shuffle(const char* op, const Tensor& x, int64_t factor) {
  ops::check_defined(op, x, "input");
  if (x.dim() < 3) {
    throw ShapeError(std::string(op) + ": input must be [*, C, H, W] (at least 3-d), got shape " +
                     shape_str(x.sizes()));
  }
  if (factor < 1) {
    throw Error(std::string(op) + ": the factor must be >= 1, got " + std::to_string(factor) + " (input " +
                shape_str(x.sizes()) + ")");
  }
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor) {
  const char* op = "pixel_shuffle";
  check_pixel_shuffle(op, x, upscale_factor);
  const int64_t r = upscale_factor, c = x.size(-3), h = x.size(-2), w = x.size(-1);
  if (c % (r * r) != 0) {
    throw ShapeError("pixel_shuffle: the input's " + std::to_string(c) + " channels are not divisible by the " +
                     "upscale factor squared, " + std::to_string(r * r) + " (input " + shape_str(x.sizes()) + ")");
  }
  const Shape lead(x.sizes().begin(), x.sizes().end() - 3);
  const int64_t l = static_cast<int64_t>(lead.size());
  Shape split = lead, dims, out = lead;
  for (int64_t e : {c / (r * r), r, r, h, w}) split.push_back(e);
  for (int64_t d = 0; d < l; ++d) dims.push_back(d);
  for (int64_t d : {0, 3, 1, 4, 2}) dims.push_back(l + d);  // [c, h, r, w, r]
  for (int64_t e : {c / (r * r), h * r, w * r}) out.push_back(e);
  return x.reshape(split).permute(dims).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor) {
  const char* op = "pixel_unshuffle";
  check_pixel_shuffle(op, x, downscale_factor);
  const int64_t r = downscale_factor, c = x.size(-3), h = x.size(-2), w = x.size(-1);
  if (h % r != 0 || w % r != 0) {
    throw ShapeError("pixel_unshuffle: the input's height " + std::to_string(h) + " and width " + std::to_string(w) +
                     " must be divisible by the downscale factor " + std::to_string(r) + " (input " +
                     shape_str(x.sizes()) + ")");
  }
  const Shape lead(x.sizes().begin(), x.sizes().end() - 3);
  const int64_t l = static_cast<int64_t>(lead.size());
  Shape split = lead, dims, out = lead;
  for (int64_t e : {c, h / r, r, w / r, r}) split.push_back(e);
  for (int64_t d = 0; d < l; ++d) dims.push_back(d);
  for (int64_t d : {0, 2, 4, 1, 3}) dims.push_back(l + d);  // [c, r, r, h / r, w / r]
  for (int64_t e : {c * r * r, h / r, w / r}) out.push_back(e);
  return x.reshape(split).permute(dims).reshape(out);
}

Tensor channel_shuffle(const Tensor& x, int64_t groups) {
  const char* op = "channel_shuffle";
  ops::check_defined(op, x, "input");
  if (x.dim() < 3) {
    throw ShapeError("channel_shuffle: input must be [N, C, *] (at least 3-d), got shape " + shape_str(x.sizes()));
  }
  if (groups < 1 || x.size(1) % groups != 0) {
    throw ShapeError("channel_shuffle: groups " + std::to_string(groups) + " must be >= 1 and divide the input's " +
                     std::to_string(x.size(1)) + " channels (input " + shape_str(x.sizes()) + ")");
  }
  Shape split = x.sizes();
  split[1] = x.size(1) / groups;
  split.insert(split.begin() + 1, groups);
  return x.reshape(split).transpose(1, 2).reshape(x.sizes());
}

}  // namespace kiln
