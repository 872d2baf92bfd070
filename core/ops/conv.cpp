// conv2d: checks, then one kernel per pass through the problem description both devices share
// (kernels/conv.h): the CPU lowers it to im2col + GEMM, CUDA calls cuDNN. The convolution runs
// channels-last when the input or the weight is (a converted model converts an NCHW input once, at
// its first conv); input and weight go in dense in that layout, and the weight gradient comes back
// laid out like the weight. A weight of the other layout is copied on every call: the slow path.
#include "core/ops/conv.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/image.h"
#include "core/ops/layout_stats.h"
#include "core/ops/reduce.h"
#include "kernels/conv.h"
#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln {

using ops::empty_image;
using ops::image_strides;
using ops::pair_str;

namespace {

// Whether t is laid out channels-last. A layout that is both NCHW and channels-last (one channel,
// or 1x1 images) counts only when its strides are exactly channels-last's, as Module::to leaves
// them: that is how the 1-channel stem conv of a converted model knows to run channels-last.
bool laid_out_channels_last(const Tensor& t) {
  if (ops::is_channels_last(t)) return true;
  return t.dim() == 4 && t.strides() == channels_last_strides(t.sizes()) &&
         t.strides() != contiguous_strides(t.sizes());
}

// The slow path, said once per process (at Info: the result is right, only slower).
void note_weight_copy(const char* op, const Tensor& x, const Tensor& weight) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  KILN_LOG(Info, std::string(op) + ": a channels-last input " + shape_str(x.sizes()) + " meets an NCHW weight " +
                     shape_str(weight.sizes()) +
                     ": the weight is copied to channels-last on every call, and its gradient back to NCHW; convert "
                     "the model with Module::to(MemoryFormat::ChannelsLast) (said once; layout_copy_count() counts "
                     "every copy)");
}

// An operand for the convolution kernels in `format`. cuDNN picks its algorithm without seeing the
// data pointers, and its vectorized kernels (tensor-core ones in half precision) may assume 16-byte
// alignment, which a dense view with a storage offset (x[1:], one piece of a split batch) need not
// have: on the GPU such an operand is copied to a new block (the caching allocator's are 512-byte
// aligned) and the copy counted as a layout copy. The CPU kernels take any address.
Tensor conv_operand(const Tensor& t, MemoryFormat format, const char* what) {
  Tensor r = ops::to_layout(t, format, what);
  if (!r.is_cuda() || reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 == 0) return r;
  ops::note_layout_copy(what);
  return r.clone(format);
}

// The checks conv2d and conv_transpose2d share, in this order: both operands defined and on one
// device, 4-d, one floating dtype (the bias's included), positive groups, stride and dilation,
// non-negative padding, a non-empty kernel, and cuDNN on for a CUDA input. Returns "input [..],
// weight [..]", the tail of every message the ops write about these operands.
std::string check_conv_operands(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const char* weight_form, Pair stride, Pair padding, Pair dilation, int64_t groups) {
  const std::string name(op);
  ops::check_defined(op, x, "input");
  ops::check_defined(op, weight, "weight");
  ops::common_device(op, {&x, &weight, &bias});
  if (x.dim() != 4) throw ShapeError(name + ": input must be 4-d [N, C, H, W], got shape " + shape_str(x.sizes()));
  if (weight.dim() != 4) {
    throw ShapeError(name + ": weight must be 4-d " + weight_form + ", got shape " + shape_str(weight.sizes()) +
                     " (input " + shape_str(x.sizes()) + ")");
  }
  const std::string shapes = "input " + shape_str(x.sizes()) + ", weight " + shape_str(weight.sizes());
  ops::check_floating(op, x, "input");
  ops::check_conv_dtypes(op, x, weight, bias, shapes);
  if (groups <= 0) throw Error(name + ": groups must be positive, got " + std::to_string(groups) + " (" + shapes + ")");
  if (stride[0] <= 0 || stride[1] <= 0) {
    throw Error(name + ": stride must be positive, got " + pair_str(stride) + " (" + shapes + ")");
  }
  if (dilation[0] <= 0 || dilation[1] <= 0) {
    throw Error(name + ": dilation must be positive, got " + pair_str(dilation) + " (" + shapes + ")");
  }
  if (padding[0] < 0 || padding[1] < 0) {
    throw Error(name + ": padding must be non-negative, got " + pair_str(padding) + " (" + shapes + ")");
  }
  if (weight.size(2) <= 0 || weight.size(3) <= 0)
    throw ShapeError(name + ": kernel size must be positive (" + shapes + ")");
  if (x.is_cuda() && !cuda::math_switches().cudnn_enabled) {
    throw DeviceError(name + ": cuDNN is disabled (cuda::math_switches().cudnn_enabled) and kiln has no other CUDA " +
                      "convolution (" + shapes + ")");
  }
  return shapes;
}

// The input's `total` channels = the weight's `per_group` x groups, or a ShapeError.
void check_grouped_channels(const char* op, int64_t total, int64_t per_group, int64_t groups,
                            const std::string& shapes) {
  int64_t expected = 0;
  const bool overflows = __builtin_mul_overflow(per_group, groups, &expected);
  if (!overflows && expected == total) return;
  std::string expects =
      overflows ? std::to_string(per_group) + " x " + std::to_string(groups) : std::to_string(expected);
  if (groups > 1) expects += " (" + std::to_string(per_group) + " per group x " + std::to_string(groups) + " groups)";
  throw ShapeError(std::string(op) + ": input has " + std::to_string(total) + " channels, weight expects " + expects +
                   " (" + shapes + ")");
}

// groups divides `channels` ("the input's 3 channels"), or a ShapeError.
void check_divides(const char* op, int64_t groups, int64_t channels, const char* whose, const char* noun,
                   const std::string& shapes) {
  if (channels % groups == 0) return;
  throw ShapeError(std::string(op) + ": groups " + std::to_string(groups) + " does not divide " + whose + " " +
                   std::to_string(channels) + " " + noun + " (" + shapes + ")");
}

void check_bias(const char* op, const Tensor& bias, int64_t out_channels, const std::string& shapes) {
  if (!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_channels)) return;
  throw ShapeError(std::string(op) + ": bias must have shape [" + std::to_string(out_channels) +
                   "] (one per output channel), got " + shape_str(bias.sizes()) + " (" + shapes + ")");
}

// The layout a convolution runs in, and its operands dense in it. Either operand being
// channels-last makes the convolution channels-last, as in PyTorch: a converted model fed NCHW
// images copies the input once at the stem and runs channels-last from there on, instead of copying
// every weight of every layer back to NCHW. The fast path copies nothing: input and weight already
// lie in `format`. A weight in the other layout is the slow path: it is copied here on every call,
// and again in backward, because the ops save the weight itself (its version counter must catch an
// in-place update before backward), not the copy. Sets p's layout and the math switches (read at
// each call, as PyTorch reads its flags; the CPU ignores them).
struct ConvOperands {
  MemoryFormat format = MemoryFormat::Contiguous;         // the convolution's
  MemoryFormat weight_format = MemoryFormat::Contiguous;  // the weight's own: its gradient comes back in it
  Tensor x, weight;
};

ConvOperands conv_operands(const char* op, const Tensor& x, const Tensor& weight, Conv2dArgs& p) {
  const bool x_cl = laid_out_channels_last(x), w_cl = laid_out_channels_last(weight);
  p.channels_last = x_cl || w_cl;
  const cuda::MathSwitches& ms = cuda::math_switches();
  p.allow_tf32 = ms.allow_tf32_cudnn;
  p.benchmark = ms.cudnn_benchmark;
  ConvOperands r;
  r.format = p.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  r.weight_format = w_cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  if (x_cl && !w_cl && !weight.is_contiguous(r.format)) note_weight_copy(op, x, weight);
  r.x = conv_operand(x, r.format, (std::string(op) + " (input)").c_str());
  r.weight = conv_operand(weight, r.format, (std::string(op) + " (weight)").c_str());
  return r;
}

// A weight gradient laid out like the weight, so the optimizer reads both without a copy: dw itself
// when it is (not a detached alias: the engine adopts a gradient buffer as .grad only when nothing
// else refers to it).
Tensor weight_grad_layout(Tensor dw, MemoryFormat weight_format, const char* what) {
  return dw.is_contiguous(weight_format) ? dw : ops::to_layout(dw, weight_format, what);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  const char* op = "conv2d";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return conv2d((*c)[0], (*c)[1], (*c)[2], stride, padding, dilation, groups);
  }
  const std::string shapes =
      check_conv_operands(op, x, weight, bias, "[C_out, C_in / groups, kH, kW]", stride, padding, dilation, groups);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t cout = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  check_divides(op, groups, c, "the input's", "channels", shapes);
  check_divides(op, groups, cout, "the weight's", "output channels", shapes);
  check_grouped_channels(op, c, weight.size(1), groups, shapes);
  check_bias(op, bias, cout, shapes);
  const std::optional<int64_t> ohs = ops::window_out_size(h, kh, stride[0], padding[0], dilation[0]);
  const std::optional<int64_t> ows = ops::window_out_size(w, kw, stride[1], padding[1], dilation[1]);
  if (!ohs || !ows) {
    throw ShapeError("conv2d: the output size overflows int64 (kernel " + std::to_string(kh) + "x" +
                     std::to_string(kw) + ", stride " + pair_str(stride) + ", padding " + pair_str(padding) +
                     ", dilation " + pair_str(dilation) + "; " + shapes + ")");
  }
  const int64_t oh = *ohs, ow = *ows;
  // The products fit: window_out_size computed them without overflow.
  // Printed unsigned: a reach of INT64_MAX plus one still reads right.
  const uint64_t ekh = static_cast<uint64_t>(dilation[0] * (kh - 1)) + 1;
  const uint64_t ekw = static_cast<uint64_t>(dilation[1] * (kw - 1)) + 1;
  if (oh <= 0 || ow <= 0) {
    throw ShapeError("conv2d: kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " (dilation " +
                     pair_str(dilation) + ", spans " + std::to_string(ekh) + "x" + std::to_string(ekw) +
                     ") is larger than the padded input " + std::to_string(h + 2 * padding[0]) + "x" +
                     std::to_string(w + 2 * padding[1]) + ": output size " + std::to_string(oh) + "x" +
                     std::to_string(ow) + " is not positive (" + shapes + ", padding " + pair_str(padding) + ")");
  }

  Conv2dArgs p;
  p.dtype = x.dtype();
  p.geo = {
      n, c, h, w, oh, ow, Window2d{kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]}};
  p.groups = groups;
  p.out_channels = cout;
  const ConvOperands in = conv_operands(op, x, weight, p);
  const Tensor bc = bias.defined() ? ops::to_layout(bias, MemoryFormat::Contiguous, "conv2d (bias)") : Tensor();
  Tensor out = empty_image(op, {n, cout, oh, ow}, x.dtype(), x.device(), p.channels_last);
  p.x_strides = image_strides(in.x);
  p.y_strides = image_strides(out);
  ops::KernelScope scope(op, {&x, &weight, &bias});  // the op's tensor inputs: autocast's entry
  scope.run(kernels::conv2d_forward, p, out.data_ptr(), in.x.data_ptr(), in.weight.data_ptr(),
            bc.defined() ? bc.data_ptr() : nullptr);

  if (needs_grad({&x, &weight, &bias})) {
    const bool need_x = needs_grad({&x}), need_w = needs_grad({&weight});
    const Shape in_shape = x.sizes(), wshape = weight.sizes();
    const MemoryFormat format = in.format, w_format = in.weight_format;
    // The input gradient needs the weight, the weight gradient needs the input; save only those.
    record_function(op, {x, weight, bias}, {out}, {need_w ? x : Tensor(), need_x ? weight : Tensor()},
                    [p, format, in_shape, wshape, w_format](const FunctionNode::Context& ctx) {
                      const Tensor& g = ctx.grads[0];
                      TensorList r(3);
                      Conv2dArgs q = p;
                      Tensor dy;
                      if (ctx.needs_input_grad[0] || ctx.needs_input_grad[1]) {
                        dy = conv_operand(g, format, "conv2d backward (grad_output)");
                        q.y_strides = image_strides(dy);
                      }
                      if (ctx.needs_input_grad[0]) {
                        const Tensor wv = conv_operand(ctx.saved_at(1), format, "conv2d backward (weight)");
                        Tensor dx = empty_image("conv2d backward", in_shape, q.dtype, g.device(), q.channels_last);
                        q.x_strides = image_strides(dx);
                        ops::launch("conv2d backward", g.device(), kernels::conv2d_backward_data, q, dx.data_ptr(),
                                    dy.data_ptr(), wv.data_ptr());
                        r[0] = dx;
                      }
                      if (ctx.needs_input_grad[1]) {
                        const Tensor xv = conv_operand(ctx.saved_at(0), format, "conv2d backward (input)");
                        Tensor dw = empty_image("conv2d backward", wshape, q.dtype, g.device(), q.channels_last);
                        q.x_strides = image_strides(xv);
                        ops::launch("conv2d backward", g.device(), kernels::conv2d_backward_filter, q, dw.data_ptr(),
                                    xv.data_ptr(), dy.data_ptr());
                        r[1] = weight_grad_layout(dw, w_format, "conv2d backward (grad_weight)");
                      }
                      // kiln's reduction: deterministic on both devices.
                      if (ctx.needs_input_grad[2]) r[2] = sum(g, {0, 2, 3});
                      return r;
                    });
  }
  return out;
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
                        Pair output_padding, int64_t groups, Pair dilation) {
  const char* op = "conv_transpose2d";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return conv_transpose2d((*c)[0], (*c)[1], (*c)[2], stride, padding, output_padding, groups, dilation);
  }
  const std::string shapes =
      check_conv_operands(op, x, weight, bias, "[C_in, C_out / groups, kH, kW]", stride, padding, dilation, groups);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t kh = weight.size(2), kw = weight.size(3);
  if (weight.size(0) != c) {
    throw ShapeError("conv_transpose2d: input has " + std::to_string(c) + " channels, weight expects " +
                     std::to_string(weight.size(0)) + " (its first dimension; " + shapes + ")");
  }
  check_divides(op, groups, c, "the input's", "channels", shapes);
  int64_t cout = 0;
  if (__builtin_mul_overflow(weight.size(1), groups, &cout)) {
    throw ShapeError("conv_transpose2d: " + std::to_string(weight.size(1)) + " output channels per group x " +
                     std::to_string(groups) + " groups overflows int64 (" + shapes + ")");
  }
  check_bias(op, bias, cout, shapes);
  // PyTorch also takes an output_padding below the dilation; kiln asks for one below the stride,
  // where conv2d of the output's size gives back the input's.
  if (output_padding[0] < 0 || output_padding[1] < 0 || output_padding[0] >= stride[0] ||
      output_padding[1] >= stride[1]) {
    throw Error("conv_transpose2d: output_padding " + pair_str(output_padding) +
                " must be non-negative and less than the stride " + pair_str(stride) + " (" + shapes + ")");
  }
  const std::optional<int64_t> ohs =
      ops::transposed_out_size(h, kh, stride[0], padding[0], dilation[0], output_padding[0]);
  const std::optional<int64_t> ows =
      ops::transposed_out_size(w, kw, stride[1], padding[1], dilation[1], output_padding[1]);
  const std::string geometry = "kernel " + std::to_string(kh) + "x" + std::to_string(kw) + ", stride " +
                               pair_str(stride) + ", padding " + pair_str(padding) + ", output_padding " +
                               pair_str(output_padding) + ", dilation " + pair_str(dilation) + "; " + shapes;
  if (!ohs || !ows) throw ShapeError("conv_transpose2d: the output size overflows int64 (" + geometry + ")");
  const int64_t oh = *ohs, ow = *ows;
  if (oh <= 0 || ow <= 0) {
    throw ShapeError("conv_transpose2d: output size " + std::to_string(oh) + "x" + std::to_string(ow) +
                     " is not positive: the padding crops more than the transposed convolution makes (" + geometry +
                     ")");
  }

  // The convolution this op transposes: its input is our output [N, C_out, OH, OW], its output our
  // input [N, C_in, H, W], and the weight [C_in, C_out / groups, kH, kW] is its filter.
  Conv2dArgs p;
  p.dtype = x.dtype();
  p.geo = {
      n, cout, oh, ow, h, w, Window2d{kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]}};
  p.groups = groups;
  p.out_channels = c;
  const ConvOperands in = conv_operands(op, x, weight, p);
  Tensor out = empty_image(op, {n, cout, oh, ow}, x.dtype(), x.device(), p.channels_last);
  p.x_strides = image_strides(out);
  p.y_strides = image_strides(in.x);
  {
    ops::KernelScope scope(op, {&x, &weight, &bias});  // the op's tensor inputs: autocast's entry
    scope.run(kernels::conv2d_backward_data, p, out.data_ptr(), in.x.data_ptr(), in.weight.data_ptr());
  }
  if (bias.defined()) {  // a broadcast add_, as PyTorch adds the bias of a transposed convolution
    NoGradGuard no_grad;
    out.add_(bias.detach().view({1, cout, 1, 1}));
  }

  if (needs_grad({&x, &weight, &bias})) {
    const bool need_x = needs_grad({&x}), need_w = needs_grad({&weight});
    const Shape in_shape = x.sizes(), wshape = weight.sizes();
    const MemoryFormat format = in.format, w_format = in.weight_format;
    record_function(
        op, {x, weight, bias}, {out}, {need_w ? x : Tensor(), need_x ? weight : Tensor()},
        [p, format, in_shape, wshape, w_format](const FunctionNode::Context& ctx) {
          const Tensor& g = ctx.grads[0];
          TensorList r(3);
          Conv2dArgs q = p;
          Tensor gc;
          if (ctx.needs_input_grad[0] || ctx.needs_input_grad[1]) {
            gc = conv_operand(g, format, "conv_transpose2d backward (grad_output)");
            q.x_strides = image_strides(gc);
          }
          if (ctx.needs_input_grad[0]) {  // the convolution of the output gradient
            const Tensor wv = conv_operand(ctx.saved_at(1), format, "conv_transpose2d backward (weight)");
            Tensor dx = empty_image("conv_transpose2d backward", in_shape, q.dtype, g.device(), q.channels_last);
            q.y_strides = image_strides(dx);
            ops::launch("conv_transpose2d backward", g.device(), kernels::conv2d_forward, q, dx.data_ptr(),
                        gc.data_ptr(), wv.data_ptr(), nullptr);
            r[0] = dx;
          }
          if (ctx.needs_input_grad[1]) {  // the input plays the convolution's output gradient
            const Tensor xv = conv_operand(ctx.saved_at(0), format, "conv_transpose2d backward (input)");
            Tensor dw = empty_image("conv_transpose2d backward", wshape, q.dtype, g.device(), q.channels_last);
            q.y_strides = image_strides(xv);
            ops::launch("conv_transpose2d backward", g.device(), kernels::conv2d_backward_filter, q, dw.data_ptr(),
                        gc.data_ptr(), xv.data_ptr());
            r[1] = weight_grad_layout(dw, w_format, "conv_transpose2d backward (grad_weight)");
          }
          if (ctx.needs_input_grad[2]) r[2] = sum(g, {0, 2, 3});
          return r;
        });
  }
  return out;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  const char* op = "conv1d";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, weight, "weight");
  if (x.dim() != 2 && x.dim() != 3) {
    throw ShapeError("conv1d: input must be [N, C, L] or [C, L], got shape " + shape_str(x.sizes()));
  }
  if (weight.dim() != 3) {
    throw ShapeError("conv1d: weight must be 3-d [C_out, C_in / groups, k], got shape " + shape_str(weight.sizes()) +
                     " (input " + shape_str(x.sizes()) + ")");
  }
  const std::string shapes = "input " + shape_str(x.sizes()) + ", weight " + shape_str(weight.sizes());
  if (groups <= 0) throw Error("conv1d: groups must be positive, got " + std::to_string(groups) + " (" + shapes + ")");
  if (stride <= 0 || dilation <= 0 || padding < 0) {
    throw Error("conv1d: stride and dilation must be positive and padding non-negative, got stride " +
                std::to_string(stride) + ", padding " + std::to_string(padding) + ", dilation " +
                std::to_string(dilation) + " (" + shapes + ")");
  }
  const int64_t channels = x.size(x.dim() - 2);
  if (channels != weight.size(1) * groups) {
    throw ShapeError("conv1d: input has " + std::to_string(channels) + " channels, weight expects " +
                     std::to_string(weight.size(1) * groups) + " (" + shapes + ", groups " + std::to_string(groups) +
                     ")");
  }
  const bool batched = x.dim() == 3;
  const Tensor x4 = (batched ? x : x.unsqueeze(0)).unsqueeze(2);
  const Tensor y = conv2d(x4, weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups).squeeze(2);
  return batched ? y : y.squeeze(0);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  const char* op = "conv_transpose1d";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, weight, "weight");
  if (x.dim() != 2 && x.dim() != 3) {
    throw ShapeError("conv_transpose1d: input must be [N, C, L] or [C, L], got shape " + shape_str(x.sizes()));
  }
  if (weight.dim() != 3) {
    throw ShapeError("conv_transpose1d: weight must be 3-d [C_in, C_out / groups, k], got shape " +
                     shape_str(weight.sizes()) + " (input " + shape_str(x.sizes()) + ")");
  }
  const std::string shapes = "input " + shape_str(x.sizes()) + ", weight " + shape_str(weight.sizes());
  if (groups <= 0 || stride <= 0 || dilation <= 0 || padding < 0 || output_padding < 0 || output_padding >= stride) {
    throw Error(
        "conv_transpose1d: groups, stride and dilation must be positive, padding non-negative and "
        "output_padding in [0, stride), got groups " +
        std::to_string(groups) + ", stride " + std::to_string(stride) + ", padding " + std::to_string(padding) +
        ", output_padding " + std::to_string(output_padding) + ", dilation " + std::to_string(dilation) + " (" +
        shapes + ")");
  }
  const int64_t channels = x.size(x.dim() - 2);
  if (channels != weight.size(0)) {
    throw ShapeError("conv_transpose1d: input has " + std::to_string(channels) + " channels, weight expects " +
                     std::to_string(weight.size(0)) + " (its first dimension; " + shapes + ")");
  }
  // conv_transpose2d checks the rest (dtypes, devices, groups against the channels, the bias, the
  // output size) and names itself, in the 2-d views' shapes.
  const bool batched = x.dim() == 3;
  const Tensor x4 = (batched ? x : x.unsqueeze(0)).unsqueeze(2);
  const Tensor y = conv_transpose2d(x4, weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {0, output_padding},
                                    groups, {1, dilation})
                       .squeeze(2);
  return batched ? y : y.squeeze(0);
}

}  // namespace kiln
