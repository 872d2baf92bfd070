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
void note_weight_copy(const Tensor& x, const Tensor& weight) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  KILN_LOG(Info, "conv2d: a channels-last input " + shape_str(x.sizes()) + " meets an NCHW weight " +
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

}  // namespace

using ops::empty_image;
using ops::image_strides;
using ops::is_channels_last;
using ops::pair_str;

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  const char* op = "conv2d";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return conv2d((*c)[0], (*c)[1], (*c)[2], stride, padding, dilation, groups);
  }
  ops::check_defined(op, x, "input");
  ops::check_defined(op, weight, "weight");
  ops::common_device(op, {&x, &weight, &bias});
  if (x.dim() != 4) {
    throw ShapeError("conv2d: input must be 4-d [N, C, H, W], got shape " + shape_str(x.sizes()));
  }
  if (weight.dim() != 4) {
    throw ShapeError("conv2d: weight must be 4-d [C_out, C_in / groups, kH, kW], got shape " +
                     shape_str(weight.sizes()) + " (input " + shape_str(x.sizes()) + ")");
  }
  const std::string shapes = "input " + shape_str(x.sizes()) + ", weight " + shape_str(weight.sizes());
  ops::check_floating(op, x, "input");
  if (x.dtype() != weight.dtype() || (bias.defined() && bias.dtype() != x.dtype())) {
    throw DTypeError(std::string("conv2d: input, weight and bias must share a dtype, got input ") +
                     dtype_name(x.dtype()) + ", weight " + dtype_name(weight.dtype()) +
                     (bias.defined() ? std::string(", bias ") + dtype_name(bias.dtype()) : std::string()) + " (" +
                     shapes + ")");
  }
  if (groups <= 0) throw Error("conv2d: groups must be positive, got " + std::to_string(groups) + " (" + shapes + ")");
  if (stride[0] <= 0 || stride[1] <= 0) {
    throw Error("conv2d: stride must be positive, got " + pair_str(stride) + " (" + shapes + ")");
  }
  if (dilation[0] <= 0 || dilation[1] <= 0) {
    throw Error("conv2d: dilation must be positive, got " + pair_str(dilation) + " (" + shapes + ")");
  }
  if (padding[0] < 0 || padding[1] < 0) {
    throw Error("conv2d: padding must be non-negative, got " + pair_str(padding) + " (" + shapes + ")");
  }
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t cout = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  if (c % groups != 0) {
    throw ShapeError("conv2d: groups " + std::to_string(groups) + " does not divide the input's " + std::to_string(c) +
                     " channels (" + shapes + ")");
  }
  if (cout % groups != 0) {
    throw ShapeError("conv2d: groups " + std::to_string(groups) + " does not divide the weight's " +
                     std::to_string(cout) + " output channels (" + shapes + ")");
  }
  int64_t expected_c = 0;
  const bool c_overflows = __builtin_mul_overflow(weight.size(1), groups, &expected_c);
  if (c_overflows || expected_c != c) {
    std::string expects = c_overflows ? std::to_string(weight.size(1)) + " x " + std::to_string(groups)
                                      : std::to_string(expected_c);
    if (groups > 1)
      expects += " (" + std::to_string(weight.size(1)) + " per group x " + std::to_string(groups) + " groups)";
    throw ShapeError("conv2d: input has " + std::to_string(c) + " channels, weight expects " + expects + " (" + shapes +
                     ")");
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != cout)) {
    throw ShapeError("conv2d: bias must have shape [" + std::to_string(cout) + "] (one per output channel), got " +
                     shape_str(bias.sizes()) + " (" + shapes + ")");
  }
  if (kh <= 0 || kw <= 0) throw ShapeError("conv2d: kernel size must be positive (" + shapes + ")");
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
  if (x.is_cuda() && !cuda::math_switches().cudnn_enabled) {
    throw DeviceError("conv2d: cuDNN is disabled (cuda::math_switches().cudnn_enabled) and kiln has no other CUDA "
                      "convolution (" + shapes + ")");
  }

  Conv2dArgs p;
  p.dtype = x.dtype();
  p.geo = {
      n, c, h, w, oh, ow, Window2d{kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]}};
  p.groups = groups;
  p.out_channels = cout;
  // Either operand being channels-last makes the convolution channels-last, as in PyTorch: a
  // converted model fed NCHW images copies the input once at the stem and runs channels-last from
  // there on, instead of copying every weight of every layer back to NCHW.
  const bool x_cl = laid_out_channels_last(x), w_cl = laid_out_channels_last(weight);
  p.channels_last = x_cl || w_cl;
  // Read at each call, as PyTorch reads its flags; the CPU ignores them.
  const cuda::MathSwitches& ms = cuda::math_switches();
  p.allow_tf32 = ms.allow_tf32_cudnn;
  p.benchmark = ms.cudnn_benchmark;
  const MemoryFormat format = p.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  // The fast path copies nothing: input and weight already lie in `format` (a converted model with
  // channels-last images). A weight in the other layout is the slow path: it is copied here on every
  // call, and again in backward, because the forward saves the weight itself (its version counter
  // must catch an in-place update before backward), not the copy.
  if (x_cl && !w_cl && !weight.is_contiguous(format)) note_weight_copy(x, weight);
  const Tensor xc = conv_operand(x, format, "conv2d (input)");
  const Tensor wc = conv_operand(weight, format, "conv2d (weight)");
  const Tensor bc = bias.defined() ? ops::to_layout(bias, MemoryFormat::Contiguous, "conv2d (bias)") : Tensor();
  Tensor out = empty_image(op, {n, cout, oh, ow}, x.dtype(), x.device(), p.channels_last);
  p.x_strides = image_strides(xc);
  p.y_strides = image_strides(out);
  ops::KernelScope scope(op, {&x, &weight, &bias});  // the op's tensor inputs: autocast's entry
  scope.run(kernels::conv2d_forward, p, out.data_ptr(), xc.data_ptr(), wc.data_ptr(),
            bc.defined() ? bc.data_ptr() : nullptr);

  if (needs_grad({&x, &weight, &bias})) {
    const bool need_x = needs_grad({&x}), need_w = needs_grad({&weight});
    const Shape in_shape = x.sizes(), wshape = weight.sizes();
    const MemoryFormat w_format = w_cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
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
                        // Laid out like the weight, so the optimizer reads both without a copy. dw
                        // itself when it is (not a detached alias: the engine adopts a gradient
                        // buffer as .grad only when nothing else refers to it).
                        if (!dw.is_contiguous(w_format)) {
                          dw = ops::to_layout(dw, w_format, "conv2d backward (grad_weight)");
                        }
                        r[1] = dw;
                      }
                      // kiln's reduction: deterministic on both devices.
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

}  // namespace kiln
