// The FFT family's ops made of its transforms and of other ops (core/ops/fft.h): the frequency
// grids and shifts, the short-time Fourier transform and its inverse, and complex arithmetic on
// (real, imaginary) pairs.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/fft.h"
#include "core/ops/fft_common.h"
#include "core/ops/fold.h"
#include "core/ops/helpers.h"
#include "core/ops/math.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {

using fft_detail::check_input;
using fft_detail::cmul;
using fft_detail::conj;
using fft_detail::im_of;
using fft_detail::pair;
using fft_detail::re_of;

// --- frequencies and shifts ---------------------------------------------------------------------

namespace {

Tensor frequencies(const char* op, int64_t n, int64_t count, double d, const TensorOptions& options, bool wrap) {
  if (n < 0) throw Error(std::string(op) + ": n must be non-negative, got " + std::to_string(n));
  if (!is_floating(options.dtype)) {
    throw DTypeError(std::string(op) + ": the frequencies need a floating dtype, got " + ops::dtype_str(options.dtype));
  }
  std::vector<double> v;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = wrap && i >= (n + 1) / 2 ? i - n : i;
    v.push_back(static_cast<double>(k) / (d * static_cast<double>(n)));
  }
  return tensor(v, {count}, TensorOptions(DType::Float64)).to(options.device, options.dtype);
}

Tensor shift(const char* op, const Tensor& x, const std::optional<Shape>& dims, bool inverse) {
  ops::check_defined(op, x, "input");
  Shape ds;
  if (dims) {
    for (int64_t d : *dims) ds.push_back(ops::checked_dim(op, x, d));
  } else {
    for (int64_t d = 0; d < x.dim(); ++d) ds.push_back(d);
  }
  if (ds.empty()) return x.clone();
  Shape shifts;
  for (int64_t d : ds) shifts.push_back(inverse ? (x.size(d) + 1) / 2 : x.size(d) / 2);
  return roll(x, shifts, ds);
}

}  // namespace

Tensor fftfreq(int64_t n, double d, TensorOptions options) { return frequencies("fftfreq", n, n, d, options, true); }
Tensor rfftfreq(int64_t n, double d, TensorOptions options) {
  return frequencies("rfftfreq", n, n < 0 ? 0 : n / 2 + 1, d, options, false);
}
Tensor fftshift(const Tensor& x, std::optional<Shape> dims) { return shift("fftshift", x, dims, false); }
Tensor ifftshift(const Tensor& x, std::optional<Shape> dims) { return shift("ifftshift", x, dims, true); }

// --- the short-time Fourier transform -----------------------------------------------------------

namespace {

struct Frames {
  int64_t hop, win;
  Tensor window;  // n_fft long (the given one centred between zeros), or undefined for ones
};

// The hop and the window of stft and istft, checked against the signal x (or the spectrum).
Frames frames_of(const char* op, const Tensor& x, int64_t n_fft, std::optional<int64_t> hop_length,
                 std::optional<int64_t> win_length, const Tensor& window) {
  if (n_fft < 1) throw Error(std::string(op) + ": n_fft must be positive, got " + std::to_string(n_fft));
  Frames f;
  f.hop = hop_length.value_or(n_fft / 4);
  if (f.hop < 1) {
    throw Error(std::string(op) + ": hop_length must be positive, got " + std::to_string(f.hop) +
                (hop_length ? "" : " (n_fft / 4 for n_fft " + std::to_string(n_fft) + ")"));
  }
  f.win = win_length.value_or(n_fft);
  if (f.win < 1 || f.win > n_fft) {
    throw Error(std::string(op) + ": win_length must be in [1, n_fft = " + std::to_string(n_fft) + "], got " +
                std::to_string(f.win));
  }
  if (window.defined()) {
    if (window.dim() != 1 || window.size(0) != f.win) {
      throw ShapeError(std::string(op) + ": the window must be 1-d of win_length " + std::to_string(f.win) +
                       " samples, got shape " + shape_str(window.sizes()));
    }
    ops::check_same_dtype(op, x, "input", window, "window");
    ops::common_device(op, {&x, &window});
  }
  if (!window.defined() && f.win == n_fft) return f;
  const Tensor w = window.defined() ? window : ones({f.win}, TensorOptions(x.dtype(), x.device()));
  const int64_t left = (n_fft - f.win) / 2;
  f.window = f.win == n_fft ? w : pad(w, {left, n_fft - f.win - left});
  return f;
}

std::string norm_of(bool normalized) { return normalized ? "ortho" : "backward"; }

}  // namespace

Tensor stft(const Tensor& x, int64_t n_fft, std::optional<int64_t> hop_length, std::optional<int64_t> win_length,
            const Tensor& window, bool center, PadMode pad_mode, bool normalized, std::optional<bool> onesided) {
  const char* op = "stft";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &window})) {
    return stft((*c)[0], n_fft, hop_length, win_length, (*c)[1], center, pad_mode, normalized, onesided);
  }
  check_input(op, x, false);
  if (x.dim() > 2)
    throw ShapeError(std::string(op) + ": the signal must be [L] or [B, L], got shape " + shape_str(x.sizes()));
  const Frames f = frames_of(op, x, n_fft, hop_length, win_length, window);
  Tensor xb = x.dim() == 1 ? x.unsqueeze(0) : x;
  if (center) {
    const int64_t p = n_fft / 2, len = xb.size(1);
    if (pad_mode == PadMode::Reflect && p >= len) {
      throw ShapeError(std::string(op) + ": center pads by n_fft / 2 = " + std::to_string(p) +
                       " samples by reflection, which needs a longer signal, got " + std::to_string(len) + " samples");
    }
    if (pad_mode == PadMode::Replicate && len == 0) {
      throw ShapeError(std::string(op) + ": center pads by replication, which needs a non-empty signal");
    }
    if (pad_mode == PadMode::Circular && p > len) {
      throw ShapeError(std::string(op) + ": center pads by n_fft / 2 = " + std::to_string(p) +
                       " samples circularly, which needs at least that many, got " + std::to_string(len));
    }
    if (p > 0) xb = pad(xb.unsqueeze(1), {p, p}, pad_mode).squeeze(1);
  }
  if (n_fft > xb.size(1)) {
    throw ShapeError(std::string(op) + ": n_fft " + std::to_string(n_fft) + " is longer than the " +
                     (center ? "padded " : "") + "signal of " + std::to_string(xb.size(1)) + " samples");
  }
  Tensor frames = xb.unfold(1, n_fft, f.hop);  // [B, T, n_fft]
  if (f.window.defined()) frames = mul(frames, f.window);
  const Tensor spec = onesided.value_or(true)
                          ? rfft(frames, std::nullopt, -1, norm_of(normalized))
                          : fft(pair(frames, zeros_like(frames)), std::nullopt, -1, norm_of(normalized));
  const Tensor out = spec.transpose(1, 2);  // [B, F, T, 2]
  return x.dim() == 1 ? out.squeeze(0) : out;
}

Tensor istft(const Tensor& z, int64_t n_fft, std::optional<int64_t> hop_length, std::optional<int64_t> win_length,
             const Tensor& window, bool center, bool normalized, std::optional<bool> onesided,
             std::optional<int64_t> length) {
  const char* op = "istft";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&z, &window})) {
    return istft((*c)[0], n_fft, hop_length, win_length, (*c)[1], center, normalized, onesided, length);
  }
  check_input(op, z, true);
  if (z.dim() != 3 && z.dim() != 4) {
    throw ShapeError(std::string(op) +
                     ": the spectrum must be complex [F, T] or [B, F, T] (with its pair dim), got shape " +
                     shape_str(z.sizes()));
  }
  const Frames f = frames_of(op, z, n_fft, hop_length, win_length, window);
  if (f.hop > f.win) {  // as PyTorch's: a gap between windows leaves samples no frame covers
    throw Error(std::string(op) + ": hop_length " + std::to_string(f.hop) + " is longer than win_length " +
                std::to_string(f.win));
  }
  Tensor zb = z.dim() == 3 ? z.unsqueeze(0) : z;
  const int64_t bins = zb.size(1), count = zb.size(2), half = n_fft / 2 + 1;
  const bool one = onesided.value_or(bins != n_fft);
  if (bins != (one ? half : n_fft)) {
    throw ShapeError(std::string(op) + ": a " + (one ? "onesided" : "full") + " spectrum of n_fft " +
                     std::to_string(n_fft) + " has " + std::to_string(one ? half : n_fft) + " frequencies, got " +
                     std::to_string(bins) + " (shape " + shape_str(z.sizes()) + ")");
  }
  if (count < 1)
    throw ShapeError(std::string(op) + ": the spectrum has no frames (shape " + shape_str(z.sizes()) + ")");
  if (length && *length < 0)
    throw Error(std::string(op) + ": length must be non-negative, got " + std::to_string(*length));
  if (!one) zb = zb.narrow(1, 0, half);
  Tensor frames = irfft(zb.transpose(1, 2), n_fft, -1, norm_of(normalized));  // [B, T, n_fft]
  const Tensor w = f.window.defined() ? f.window : ones({n_fft}, TensorOptions(z.dtype(), z.device()));
  frames = mul(frames, w);
  const int64_t span = n_fft + f.hop * (count - 1), b = zb.size(0);
  const Pair out_size{1, span}, kernel{1, n_fft}, stride{1, f.hop};
  Tensor y = fold(frames.transpose(1, 2), out_size, kernel, {1, 1}, {0, 0}, stride).reshape({b, span});
  // The squared windows' sum: the window's gradient flows through it too.
  const Tensor envelope =
      fold(mul(w, w).reshape({n_fft, 1}).expand({n_fft, count}), out_size, kernel, {1, 1}, {0, 0}, stride)
          .reshape({span});
  const int64_t start = center ? n_fft / 2 : 0;
  const int64_t end = length ? start + *length : (center ? span - n_fft / 2 : span);
  const int64_t stop = std::min(end, span);
  if (stop > start) {
    y = y.narrow(1, start, stop - start);
    const Tensor env = envelope.narrow(0, start, stop - start);
    // One value read on the host (which waits for a GPU, as PyTorch's check does); the samples only
    // when the check fails, to name the first.
    if (!(min(abs(env.detach())).item<double>() >= 1e-11)) {
      const std::vector<double> e = env.to_vector_double();
      size_t i = 0;
      while (i + 1 < e.size() && std::fabs(e[i]) >= 1e-11) ++i;
      throw Error(std::string(op) + ": the squared windows overlap-add to " + num_str(e[i]) + " at output sample " +
                  std::to_string(i) +
                  ", so the signal cannot be recovered there (nonzero overlap-add is needed: a longer window or a " +
                  "shorter hop)");
    }
    y = div(y, env);
  } else {
    y = y.narrow(1, 0, 0);
  }
  if (end > stop) y = pad(y, {0, end - std::max(stop, start)});
  return z.dim() == 3 ? y.squeeze(0) : y;
}

// --- complex values as pairs --------------------------------------------------------------------

namespace {

void check_pair(const char* op, const Tensor& z, const char* what) {
  ops::check_defined(op, z, what);
  ops::check_floating(op, z, what);
  fft_detail::check_pair_dim(op, z, what);
}

// re and im broadcast to one shape, of one floating dtype and device.
std::pair<Tensor, Tensor> broadcast_parts(const char* op, const Tensor& a, const char* an, const Tensor& b,
                                          const char* bn) {
  ops::check_defined(op, a, an);
  ops::check_defined(op, b, bn);
  ops::check_floating(op, a, an);
  ops::check_same_dtype(op, a, an, b, bn);
  ops::common_device(op, {&a, &b});
  const Shape s = broadcast_shapes(a.sizes(), b.sizes(), op);
  return {a.expand(s), b.expand(s)};
}

}  // namespace

Tensor complex_pair(const Tensor& re, const Tensor& im) {
  auto [r, i] = broadcast_parts("complex_pair", re, "real part", im, "imaginary part");
  return pair(r, i);
}
Tensor complex_real(const Tensor& z) {
  check_pair("complex_real", z, "input");
  return re_of(z);
}
Tensor complex_imag(const Tensor& z) {
  check_pair("complex_imag", z, "input");
  return im_of(z);
}
Tensor complex_conj(const Tensor& z) {
  check_pair("complex_conj", z, "input");
  return conj(z);
}
Tensor complex_mul(const Tensor& a, const Tensor& b) {
  check_pair("complex_mul", a, "first operand");
  check_pair("complex_mul", b, "second operand");
  ops::check_same_dtype("complex_mul", a, "first operand", b, "second operand");
  ops::common_device("complex_mul", {&a, &b});
  broadcast_shapes(a.sizes(), b.sizes(), "complex_mul");
  return cmul(a, b);
}
Tensor complex_polar(const Tensor& abs, const Tensor& angle) {
  auto [r, t] = broadcast_parts("complex_polar", abs, "absolute value", angle, "angle");
  return pair(mul(r, cos(t)), mul(r, sin(t)));
}

Tensor complex_abs(const Tensor& z) {
  check_pair("complex_abs", z, "input");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = hypot(re_of(z), im_of(z));
  }
  if (needs_grad({&z})) {
    // |z| is recomputed in backward rather than saved, so the output may be changed in place.
    record_function("complex_abs", {z}, {out}, {z}, [](const FunctionNode::Context& ctx) {
      const Tensor zv = ctx.saved_at(0), a = hypot(re_of(zv), im_of(zv));
      const Tensor scale = where(eq(a, 0.0), 0.0, div(ctx.grads[0], a));  // z / |z|, 0 at 0
      return TensorList{mul(zv, scale.unsqueeze(-1))};
    });
  }
  return out;
}

Tensor complex_angle(const Tensor& z) {
  check_pair("complex_angle", z, "input");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = atan2(im_of(z), re_of(z));
  }
  if (needs_grad({&z})) {
    record_function("complex_angle", {z}, {out}, {z}, [](const FunctionNode::Context& ctx) {
      // d angle = (re d im - im d re) / |z|^2, 0 at 0
      const Tensor zv = ctx.saved_at(0), re = re_of(zv), im = im_of(zv);
      const Tensor sq = add(mul(re, re), mul(im, im));
      const Tensor scale = where(eq(sq, 0.0), 0.0, div(ctx.grads[0], sq));
      return TensorList{pair(mul(neg(im), scale), mul(re, scale))};
    });
  }
  return out;
}

}  // namespace kiln
