// The convolution layers: each constructor checks its arguments, registers PyTorch's parameter
// names and applies PyTorch's default init; each forward is one core op (after a pad for a
// padding_mode other than zeros, or for 'same' padding that differs before and after).
#include "nn/conv.h"

#include <cmath>
#include <string>

#include "core/ops/shape.h"
#include "kernels/error.h"
#include "nn/init.h"
#include "nn/layers.h"

namespace kiln::nn {
namespace {

using detail::check_non_negative;
using detail::new_tensor;

// A convolution layer's hyper-parameters as tuples of its spatial rank (1, 2 or 3): what its
// constructor checks and its extra_repr prints. output_padding is empty for a forward convolution.
struct ConvSpec {
  const char* layer;
  int64_t in_channels, out_channels, groups;
  Shape kernel_size, stride, padding, dilation, output_padding;
  bool same = false;  // padding='same'
  PaddingMode mode = PaddingMode::Zeros;
};

Shape tuple(Pair p) { return {p[0], p[1]}; }
Shape tuple(Triple p) { return {p[0], p[1], p[2]}; }

ConvSpec spec(const char* layer, int64_t in, int64_t out, int64_t groups, Shape kernel_size, Shape stride,
              Shape padding, Shape dilation, Shape output_padding = {}) {
  return {layer, in, out, groups, kernel_size, stride, padding, dilation, output_padding};
}

// A forward convolution's spec, with its padding_mode and padding='same'.
template <class Conv>
ConvSpec padded_spec(ConvSpec c, const Conv& m) {
  c.same = m.same_padding;
  c.mode = m.padding_mode;
  return c;
}
ConvSpec spec_of(const Conv2d& m) {
  return padded_spec(spec("Conv2d", m.in_channels, m.out_channels, m.groups, tuple(m.kernel_size), tuple(m.stride),
                          tuple(m.padding), tuple(m.dilation)),
                     m);
}
ConvSpec spec_of(const Conv1d& m) {
  return padded_spec(
      spec("Conv1d", m.in_channels, m.out_channels, m.groups, {m.kernel_size}, {m.stride}, {m.padding}, {m.dilation}),
      m);
}
ConvSpec spec_of(const ConvTranspose2d& m) {
  return spec("ConvTranspose2d", m.in_channels, m.out_channels, m.groups, tuple(m.kernel_size), tuple(m.stride),
              tuple(m.padding), tuple(m.dilation), tuple(m.output_padding));
}
ConvSpec spec_of(const ConvTranspose1d& m) {
  return spec("ConvTranspose1d", m.in_channels, m.out_channels, m.groups, {m.kernel_size}, {m.stride}, {m.padding},
              {m.dilation}, {m.output_padding});
}

ConvSpec spec_of(const Conv3d& m) {
  return padded_spec(spec("Conv3d", m.in_channels, m.out_channels, m.groups, tuple(m.kernel_size), tuple(m.stride),
                          tuple(m.padding), tuple(m.dilation)),
                     m);
}
ConvSpec spec_of(const ConvTranspose3d& m) {
  return spec("ConvTranspose3d", m.in_channels, m.out_channels, m.groups, tuple(m.kernel_size), tuple(m.stride),
              tuple(m.padding), tuple(m.dilation), tuple(m.output_padding));
}

// PyTorch's rules, checked where the layer is built: channels >= 0 and divisible by groups > 0;
// kernel_size, stride and dilation positive; padding non-negative; output_padding non-negative and
// below the stride (PyTorch checks that one at the first forward).
void check_conv_layer(const ConvSpec& c) {
  const std::string layer(c.layer);
  check_non_negative(c.layer, "in_channels", c.in_channels);
  check_non_negative(c.layer, "out_channels", c.out_channels);
  if (c.groups <= 0) throw Error(layer + ": groups must be positive, got " + std::to_string(c.groups));
  if (c.in_channels % c.groups != 0 || c.out_channels % c.groups != 0) {
    throw Error(layer + ": in_channels " + std::to_string(c.in_channels) + " and out_channels " +
                std::to_string(c.out_channels) + " must both be divisible by groups " + std::to_string(c.groups));
  }
  auto at_least = [&](const char* what, const Shape& v, int64_t min) {
    for (int64_t e : v) {
      if (e < min) {
        throw Error(layer + ": " + what + (min > 0 ? " must be positive" : " must be non-negative") + ", got " +
                    detail::py_tuple(v));
      }
    }
  };
  at_least("kernel_size", c.kernel_size, 1);
  at_least("stride", c.stride, 1);
  at_least("dilation", c.dilation, 1);
  at_least("padding", c.padding, 0);
  at_least("output_padding", c.output_padding, 0);
  for (size_t i = 0; i < c.output_padding.size(); ++i) {
    if (c.output_padding[i] >= c.stride[i]) {
      throw Error(layer + ": output_padding " + detail::py_tuple(c.output_padding) + " must be less than the stride " +
                  detail::py_tuple(c.stride));
    }
  }
}

const char* mode_name(PaddingMode m) {
  switch (m) {
    case PaddingMode::Zeros: return "zeros";
    case PaddingMode::Reflect: return "reflect";
    case PaddingMode::Replicate: return "replicate";
    case PaddingMode::Circular: return "circular";
  }
  return "?";
}

// What a forward convolution layer convolves: x, with the layer's zero padding left to the
// convolution (`padding` gets it), or x padded by pad() and convolved unpadded (`padding` gets
// zeros): for another padding_mode, and for 'same' padding that differs before and after.
Tensor padded_input(const ConvSpec& c, const Tensor& x, Shape& padding) {
  const size_t rank = c.kernel_size.size();
  for (const int64_t s : c.stride) {
    if (c.same && s != 1) {
      throw Error(std::string(c.layer) + ": padding='same' keeps the input's size, which a stride " +
                  detail::py_tuple(c.stride) + " cannot");
    }
  }
  Shape before(rank), after(rank);
  bool symmetric = true;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t total = c.same ? c.dilation[i] * (c.kernel_size[i] - 1) : 2 * c.padding[i];
    before[i] = total / 2;
    after[i] = total - before[i];
    symmetric = symmetric && before[i] == after[i];
  }
  // An input of too few dims goes to the convolution as it is, whose error names it.
  if ((c.mode == PaddingMode::Zeros && symmetric) || !x.defined() || x.dim() <= static_cast<int64_t>(rank)) {
    padding = before;
    return x;
  }
  Shape pads;  // pad's order: the last dim's (before, after) first
  for (size_t i = rank; i-- > 0;) {
    pads.push_back(before[i]);
    pads.push_back(after[i]);
  }
  padding.assign(rank, 0);
  const PadMode mode = c.mode == PaddingMode::Reflect     ? PadMode::Reflect
                       : c.mode == PaddingMode::Replicate ? PadMode::Replicate
                       : c.mode == PaddingMode::Circular  ? PadMode::Circular
                                                          : PadMode::Constant;
  return pad(x, pads, mode);
}

// extra_repr as PyTorch's _ConvNd writes it: the defaults left out.
std::string conv_repr(const ConvSpec& c, bool bias) {
  auto all = [](const Shape& v, int64_t x) {
    for (int64_t e : v) {
      if (e != x) return false;
    }
    return true;
  };
  std::string s = std::to_string(c.in_channels) + ", " + std::to_string(c.out_channels) +
                  ", kernel_size=" + detail::py_tuple(c.kernel_size) + ", stride=" + detail::py_tuple(c.stride);
  if (c.same) s += ", padding=same";
  if (!all(c.padding, 0)) s += ", padding=" + detail::py_tuple(c.padding);
  if (!all(c.dilation, 1)) s += ", dilation=" + detail::py_tuple(c.dilation);
  if (!all(c.output_padding, 0)) s += ", output_padding=" + detail::py_tuple(c.output_padding);
  if (c.groups != 1) s += ", groups=" + std::to_string(c.groups);
  if (!bias) s += ", bias=False";
  if (c.mode != PaddingMode::Zeros) s += std::string(", padding_mode=") + mode_name(c.mode);
  return s;
}

// PyTorch's init of a convolution (every conv layer's reset_parameters): kaiming_uniform_ with a =
// sqrt(5) on the weight, the bias uniform in +-1/sqrt(fan_in). fan_in reads the weight's dimension
// 1 and its kernel, so for a transposed convolution's [in, out / groups, k...] it is out / groups
// times the kernel, as in PyTorch.
void reset_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

// A convolution layer's parameters: weight of `weight_shape` and, with `bias`, bias [out_channels],
// registered under PyTorch's names and initialized as PyTorch's.
void add_conv_parameters(Module& m, const char* layer, const Shape& weight_shape, int64_t out_channels, bool bias,
                         Tensor& weight, Tensor& bias_out) {
  weight = m.register_parameter("weight", new_tensor(layer, weight_shape));
  if (bias) bias_out = m.register_parameter("bias", new_tensor(layer, {out_channels}));
  reset_conv(weight, bias_out);
}

// PyTorch's forward(input, output_size): the output_padding, per spatial dimension, that makes the
// layer map x to output_size (its spatial sizes alone, or with x's leading dimensions in front).
// Along each dimension the layer reaches lo .. lo + stride - 1, lo = (in - 1) stride - 2 padding +
// dilation (k - 1) + 1, computed in 128 bits so that no layer argument overflows it.
Shape output_padding_for(const ConvSpec& c, const Tensor& x, const Shape& output_size) {
  const std::string layer(c.layer);
  const size_t rank = c.kernel_size.size();
  if (x.dim() < static_cast<int64_t>(rank) + 1) {
    throw ShapeError(layer + ": input " + shape_str(x.sizes()) + " has too few dimensions");
  }
  if (output_size.size() != rank && output_size.size() != static_cast<size_t>(x.dim())) {
    throw ShapeError(layer + ": output_size " + shape_str(output_size) + " must have " + std::to_string(rank) +
                     " entries or the input's " + std::to_string(x.dim()) + " (input " + shape_str(x.sizes()) + ")");
  }
  auto str = [](__int128 v) {
    return v < INT64_MIN || v > INT64_MAX ? std::string("(beyond int64)") : std::to_string(static_cast<int64_t>(v));
  };
  Shape pad(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t in = x.size(x.dim() - static_cast<int64_t>(rank - i));
    const int64_t want = output_size[output_size.size() - rank + i];
    const __int128 lo = static_cast<__int128>(in - 1) * c.stride[i] - static_cast<__int128>(c.padding[i]) * 2 +
                        static_cast<__int128>(c.dilation[i]) * (c.kernel_size[i] - 1) + 1;
    const __int128 hi = lo + c.stride[i] - 1;
    if (want < lo || want > hi) {
      throw ShapeError(layer + ": output size " + std::to_string(want) + " is not one it makes from input " +
                       shape_str(x.sizes()) + ": along dimension " +
                       std::to_string(static_cast<int64_t>(i) - static_cast<int64_t>(rank)) + " it makes " + str(lo) +
                       " to " + str(hi) + " (stride " + std::to_string(c.stride[i]) + ")");
    }
    pad[i] = static_cast<int64_t>(want - lo);
  }
  return pad;
}

}  // namespace

// --- Conv2d ---------------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride, Pair padding, Pair dilation,
               int64_t groups, bool bias, PaddingMode padding_mode)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups),
      padding_mode(padding_mode) {
  check_conv_layer(spec_of(*this));
  add_conv_parameters(*this, "Conv2d", {out_channels, in_channels / groups, kernel_size[0], kernel_size[1]},
                      out_channels, bias, weight, this->bias);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, SamePadding, Pair dilation, int64_t groups,
               bool bias, PaddingMode padding_mode)
    : Conv2d(in_channels, out_channels, kernel_size, {1, 1}, {0, 0}, dilation, groups, bias, padding_mode) {
  same_padding = true;
}

void Conv2d::reset_parameters() { reset_conv(weight, bias); }

std::string Conv2d::extra_repr() const { return conv_repr(spec_of(*this), bias.defined()); }

Tensor Conv2d::forward(const Tensor& x) {
  Shape p;
  const Tensor in = padded_input(spec_of(*this), x, p);
  return conv2d(in, weight, bias, stride, {p[0], p[1]}, dilation, groups);
}

// --- Conv1d -------------------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding,
               int64_t dilation, int64_t groups, bool bias, PaddingMode padding_mode)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups),
      padding_mode(padding_mode) {
  check_conv_layer(spec_of(*this));
  add_conv_parameters(*this, "Conv1d", {out_channels, in_channels / groups, kernel_size}, out_channels, bias, weight,
                      this->bias);
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, SamePadding, int64_t dilation,
               int64_t groups, bool bias, PaddingMode padding_mode)
    : Conv1d(in_channels, out_channels, kernel_size, 1, 0, dilation, groups, bias, padding_mode) {
  same_padding = true;
}

void Conv1d::reset_parameters() { reset_conv(weight, bias); }

std::string Conv1d::extra_repr() const { return conv_repr(spec_of(*this), bias.defined()); }

Tensor Conv1d::forward(const Tensor& x) {
  Shape p;
  const Tensor in = padded_input(spec_of(*this), x, p);
  return conv1d(in, weight, bias, stride, p[0], dilation, groups);
}

// --- ConvTranspose2d ------------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride, Pair padding,
                                 Pair output_padding, int64_t groups, bool bias, Pair dilation)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      output_padding(output_padding),
      groups(groups),
      dilation(dilation) {
  check_conv_layer(spec_of(*this));
  add_conv_parameters(*this, "ConvTranspose2d", {in_channels, out_channels / groups, kernel_size[0], kernel_size[1]},
                      out_channels, bias, weight, this->bias);
}

void ConvTranspose2d::reset_parameters() { reset_conv(weight, bias); }

std::string ConvTranspose2d::extra_repr() const { return conv_repr(spec_of(*this), bias.defined()); }

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation);
}

Tensor ConvTranspose2d::forward(const Tensor& x, const Shape& output_size) {
  const Shape pad = output_padding_for(spec_of(*this), x, output_size);
  return conv_transpose2d(x, weight, bias, stride, padding, {pad[0], pad[1]}, groups, dilation);
}

// --- ConvTranspose1d ------------------------------------------------------------------------------

ConvTranspose1d::ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                                 int64_t padding, int64_t output_padding, int64_t groups, bool bias, int64_t dilation)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      output_padding(output_padding),
      groups(groups),
      dilation(dilation) {
  check_conv_layer(spec_of(*this));
  add_conv_parameters(*this, "ConvTranspose1d", {in_channels, out_channels / groups, kernel_size}, out_channels, bias,
                      weight, this->bias);
}

void ConvTranspose1d::reset_parameters() { reset_conv(weight, bias); }

std::string ConvTranspose1d::extra_repr() const { return conv_repr(spec_of(*this), bias.defined()); }

Tensor ConvTranspose1d::forward(const Tensor& x) {
  return conv_transpose1d(x, weight, bias, stride, padding, output_padding, groups, dilation);
}

Tensor ConvTranspose1d::forward(const Tensor& x, const Shape& output_size) {
  const Shape pad = output_padding_for(spec_of(*this), x, output_size);
  return conv_transpose1d(x, weight, bias, stride, padding, pad[0], groups, dilation);
}

// --- Conv3d -------------------------------------------------------------------------------------

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, Triple kernel_size, Triple stride, Triple padding,
               Triple dilation, int64_t groups, bool bias, PaddingMode padding_mode)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups),
      padding_mode(padding_mode) {
  check_conv_layer(spec_of(*this));
  add_conv_parameters(*this, "Conv3d",
                      {out_channels, in_channels / groups, kernel_size[0], kernel_size[1], kernel_size[2]},
                      out_channels, bias, weight, this->bias);
}

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, Triple kernel_size, SamePadding, Triple dilation,
               int64_t groups, bool bias, PaddingMode padding_mode)
    : Conv3d(in_channels, out_channels, kernel_size, {1, 1, 1}, {0, 0, 0}, dilation, groups, bias, padding_mode) {
  same_padding = true;
}

void Conv3d::reset_parameters() { reset_conv(weight, bias); }

std::string Conv3d::extra_repr() const { return conv_repr(spec_of(*this), bias.defined()); }

Tensor Conv3d::forward(const Tensor& x) {
  Shape p;
  const Tensor in = padded_input(spec_of(*this), x, p);
  return conv3d(in, weight, bias, stride, {p[0], p[1], p[2]}, dilation, groups);
}

// --- ConvTranspose3d ------------------------------------------------------------------------------

ConvTranspose3d::ConvTranspose3d(int64_t in_channels, int64_t out_channels, Triple kernel_size, Triple stride,
                                 Triple padding, Triple output_padding, int64_t groups, bool bias, Triple dilation)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      output_padding(output_padding),
      groups(groups),
      dilation(dilation) {
  check_conv_layer(spec_of(*this));
  add_conv_parameters(*this, "ConvTranspose3d",
                      {in_channels, out_channels / groups, kernel_size[0], kernel_size[1], kernel_size[2]},
                      out_channels, bias, weight, this->bias);
}

void ConvTranspose3d::reset_parameters() { reset_conv(weight, bias); }

std::string ConvTranspose3d::extra_repr() const { return conv_repr(spec_of(*this), bias.defined()); }

Tensor ConvTranspose3d::forward(const Tensor& x) {
  return conv_transpose3d(x, weight, bias, stride, padding, output_padding, groups, dilation);
}

Tensor ConvTranspose3d::forward(const Tensor& x, const Shape& output_size) {
  const Shape pad = output_padding_for(spec_of(*this), x, output_size);
  return conv_transpose3d(x, weight, bias, stride, padding, {pad[0], pad[1], pad[2]}, groups, dilation);
}

}  // namespace kiln::nn
