// conv2d and 2-d pooling. On the CPU conv2d is im2col + one GEMM per group over a chunk of the
// batch, in channels-last matrix form ([N*OH*OW, C_out]); chunks are sized by a column-buffer
// budget that depends only on the shapes, so the weight gradient is the same bits on any thread
// count, and float16/bfloat16 run in float32 columns. On CUDA conv2d is cuDNN, fed the tensors in
// the input's layout (channels-last stays channels-last, the weight follows it), and pooling runs
// kiln's own kernels.
#include "core/ops/conv.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "kernels/conv.h"
#include "kernels/error.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"

namespace kiln {
namespace {

// Elements of the im2col buffer per batch chunk (64 MiB of float32): bounded memory for large
// batches, one chunk for the usual training shapes.
constexpr int64_t kColumnBudget = int64_t{1} << 24;

std::string pair_str(Pair p) { return std::to_string(p[0]) + "x" + std::to_string(p[1]); }

ImageStrides image_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// Channels-last in means channels-last out; a layout that is both (C == 1, or 1x1 images) is NCHW.
bool is_channels_last(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast);
}

Tensor empty_image(const Shape& shape, DType dtype, Device device, bool channels_last) {
  return empty(shape, TensorOptions(dtype, device),
               channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}

// Element `offset` of t's data, as a raw pointer (for per-chunk kernel arguments).
void* element_ptr(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * static_cast<int64_t>(t.element_size());
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

#if defined(KILN_WITH_CUDA)
// The tensor's device made current for the scope, and that device's current stream.
struct OnDevice {
  explicit OnDevice(const Tensor& t) : guard(t.device().index), stream(cuda::current_stream(t.device().index)) {}
  cuda::DeviceGuard guard;
  Stream stream;
};
#endif

// --- conv2d ------------------------------------------------------------------------------------

struct ConvPlan {
  Conv2dGeometry geo;  // batch = N
  int64_t groups = 1;
  int64_t out_channels = 0;
  bool channels_last = false;
  DType dtype = DType::Float32;  // of input, weight and output
  DType acc = DType::Float32;    // of the columns and GEMMs

  int64_t taps() const { return geo.window.kernel_h * geo.window.kernel_w; }
  int64_t pixels() const { return geo.out_h * geo.out_w; }
  int64_t col_width() const { return geo.channels * taps(); }         // all groups
  int64_t group_k() const { return geo.channels / groups * taps(); }  // one group's GEMM depth
  int64_t group_out() const { return out_channels / groups; }
  Shape out_shape() const { return {geo.batch, out_channels, geo.out_h, geo.out_w}; }
  Shape in_shape() const { return {geo.batch, geo.channels, geo.in_h, geo.in_w}; }
  int64_t chunk() const {
    int64_t per_sample = pixels() * col_width();
    int64_t n = std::max<int64_t>(geo.batch, 1);
    return per_sample <= 0 ? n : std::clamp<int64_t>(kColumnBudget / per_sample, 1, n);
  }
  Conv2dGeometry chunk_geo(int64_t count) const {
    Conv2dGeometry g = geo;
    g.batch = count;
    return g;
  }
  // A channels-last input of the column dtype under a 1x1, stride-1, unpadded kernel is its own
  // column matrix ([N*H*W, C], ld = C): no im2col copy and no col2im.
  bool pointwise(const Tensor& x) const {
    const Window2d& w = geo.window;
    return channels_last && x.dtype() == acc && w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 &&
           w.stride_w == 1 && w.pad_h == 0 && w.pad_w == 0;
  }
};

// The GEMM batch that walks the groups: offsets of A, B and C per group.
struct GroupOffsets {
  std::vector<int64_t> a, b, c;
  GemmBatch batch() const { return {static_cast<int64_t>(a.size()), a.data(), b.data(), c.data()}; }
};
GroupOffsets group_offsets(int64_t groups, int64_t a_step, int64_t b_step, int64_t c_step) {
  GroupOffsets o;
  for (int64_t g = 0; g < groups; ++g) {
    o.a.push_back(g * a_step);
    o.b.push_back(g * b_step);
    o.c.push_back(g * c_step);
  }
  return o;
}

// Fills `cols` with the chunk's columns, or returns x itself for a pointwise conv; sets ld.
const void* chunk_columns(const ConvPlan& p, const Tensor& x, const Tensor& cols, int64_t n0, int64_t count,
                          int64_t& ld) {
  if (p.pointwise(x)) {
    ld = p.geo.channels;
    return element_ptr(x, n0 * x.stride(0));
  }
  ld = p.col_width();
  im2col_cpu(cols.data_ptr(), p.acc, ld, element_ptr(x, n0 * x.stride(0)), x.dtype(), image_strides(x),
             p.chunk_geo(count));
  return cols.data_ptr();
}

Tensor conv_forward(const ConvPlan& p, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t pixels = p.pixels(), cout = p.out_channels, k = p.group_k(), cog = p.group_out();
  // acc is the [N*P, C_out] result matrix, i.e. a channels-last tensor of the column dtype.
  Tensor acc = empty(p.out_shape(), TensorOptions(p.acc, x.device()), MemoryFormat::ChannelsLast);
  if (acc.numel() == 0) return empty_image(p.out_shape(), p.dtype, x.device(), p.channels_last);
  double beta = 0.0;
  if (bias.defined()) {
    ops::copy_raw(acc, bias.reshape({1, cout, 1, 1}));
    beta = 1.0;  // the GEMMs add onto the bias
  } else if (k == 0) {
    acc.zero_();
  }
  if (k > 0) {
    Tensor wm = weight.to(p.acc).contiguous();  // [C_out, C_in/groups * kH * kW], row-major
    const int64_t chunk = p.chunk();
    Tensor cols = p.pointwise(x) ? Tensor() : empty({chunk * pixels * p.col_width()}, TensorOptions(p.acc));
    GroupOffsets off = group_offsets(p.groups, k, cog * k, cog);
    for (int64_t n0 = 0; n0 < p.geo.batch; n0 += chunk) {
      const int64_t count = std::min(chunk, p.geo.batch - n0);
      int64_t ld = 0;
      const void* a = chunk_columns(p, x, cols, n0, count, ld);
      // out[rows, group's channels] = cols[rows, group's taps] @ W_g^T
      gemm_cpu(p.acc, false, true, count * pixels, cog, k, 1.0, a, ld, wm.data_ptr(), k, beta,
               element_ptr(acc, n0 * pixels * cout), cout, off.batch());
    }
  }
  if (p.channels_last && p.dtype == p.acc) return acc;
  Tensor out = empty_image(p.out_shape(), p.dtype, x.device(), p.channels_last);
  ops::copy_raw(out, acc);
  return out;
}

// gm: the output gradient as a channels-last tensor of the column dtype ([N*P, C_out] matrix).
Tensor conv_backward_input(const ConvPlan& p, const Tensor& gm, const Tensor& weight) {
  const int64_t pixels = p.pixels(), cout = p.out_channels, k = p.group_k(), cog = p.group_out();
  Tensor gx = empty_image(p.in_shape(), p.dtype, gm.device(), p.channels_last);
  if (gx.numel() == 0) return gx;
  if (k == 0 || cog == 0 || pixels == 0) return gx.zero_();
  Tensor wm = weight.to(p.acc).contiguous();
  GroupOffsets off = group_offsets(p.groups, cog, cog * k, k);
  const int64_t chunk = p.chunk();
  const bool direct = p.pointwise(gx);  // the column gradient is the input gradient
  Tensor cols = direct ? Tensor() : empty({chunk * pixels * p.col_width()}, TensorOptions(p.acc));
  for (int64_t n0 = 0; n0 < p.geo.batch; n0 += chunk) {
    const int64_t count = std::min(chunk, p.geo.batch - n0);
    void* c = direct ? element_ptr(gx, n0 * gx.stride(0)) : cols.data_ptr();
    const int64_t ldc = direct ? p.geo.channels : p.col_width();
    // dcols[rows, group's taps] = dout[rows, group's channels] @ W_g
    gemm_cpu(p.acc, false, false, count * pixels, k, cog, 1.0, element_ptr(gm, n0 * pixels * cout), cout, wm.data_ptr(),
             k, 0.0, c, ldc, off.batch());
    if (!direct) {
      col2im_cpu(element_ptr(gx, n0 * gx.stride(0)), p.dtype, image_strides(gx), cols.data_ptr(), p.acc, ldc,
                 p.chunk_geo(count));
    }
  }
  return gx;
}

Tensor conv_backward_weight(const ConvPlan& p, const Tensor& gm, const Tensor& x, const Shape& weight_shape) {
  const int64_t pixels = p.pixels(), cout = p.out_channels, k = p.group_k(), cog = p.group_out();
  Tensor dw = empty({cout, k}, TensorOptions(p.acc, x.device()));
  if (dw.numel() == 0) return dw.reshape(weight_shape).to(p.dtype);
  if (p.geo.batch == 0 || pixels == 0) return dw.zero_().reshape(weight_shape).to(p.dtype);
  GroupOffsets off = group_offsets(p.groups, cog, k, cog * k);
  const int64_t chunk = p.chunk();
  Tensor cols = p.pointwise(x) ? Tensor() : empty({chunk * pixels * p.col_width()}, TensorOptions(p.acc));
  for (int64_t n0 = 0; n0 < p.geo.batch; n0 += chunk) {
    const int64_t count = std::min(chunk, p.geo.batch - n0);
    int64_t ld = 0;
    const void* b = chunk_columns(p, x, cols, n0, count, ld);
    // dW_g += dout[rows, group's channels]^T @ cols[rows, group's taps]; chunks add in order.
    gemm_cpu(p.acc, true, false, cog, k, count * pixels, 1.0, element_ptr(gm, n0 * pixels * cout), cout, b, ld,
             n0 == 0 ? 0.0 : 1.0, dw.data_ptr(), k, off.batch());
  }
  return dw.reshape(weight_shape).to(p.dtype);
}

#if defined(KILN_WITH_CUDA)
// --- conv2d on CUDA (cuDNN) ---------------------------------------------------------------------

MemoryFormat conv_format(const ConvPlan& p) {
  return p.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// cuDNN's workspace: caching-allocator blocks of the current stream, held until the op returns. A
// larger request replaces the held block; the old one is reused only by later work on this stream,
// so cuDNN's earlier use of it stays safe (and inside a graph capture it comes from the capture pool).
struct CudnnWorkspace {
  Device device;
  Tensor held;

  static void* get(void* ctx, size_t bytes) {
    auto* self = static_cast<CudnnWorkspace*>(ctx);
    if (!self->held.defined() || static_cast<size_t>(self->held.numel()) < bytes) {
      self->held = empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::UInt8, self->device));
    }
    return self->held.data_ptr();
  }
  ConvWorkspace handle() { return {&CudnnWorkspace::get, this}; }
};

// The cuDNN problem of p, with x-shaped and y-shaped tensors laid out as `x_like` and `y_like`. The
// math switches are read at each call, as PyTorch reads its flags.
CudnnConv2d cudnn_problem(const ConvPlan& p, const Tensor& x_like, const Tensor& y_like) {
  CudnnConv2d c;
  c.dtype = p.dtype;
  c.geo = p.geo;
  c.out_channels = p.out_channels;
  c.groups = p.groups;
  c.x_strides = image_strides(x_like);
  c.y_strides = image_strides(y_like);
  c.channels_last = p.channels_last;
  const cuda::MathSwitches& ms = cuda::math_switches();
  c.allow_tf32 = ms.allow_tf32_cudnn;
  c.benchmark = ms.cudnn_benchmark;
  return c;
}

Tensor conv_forward_cuda(const ConvPlan& p, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor out = empty_image(p.out_shape(), p.dtype, x.device(), p.channels_last);
  if (out.numel() == 0) return out;
  if (x.numel() == 0) {  // no input channels or an all-padding image: empty sums, so just the bias
    if (bias.defined()) {
      ops::copy_raw(out, bias.reshape({1, p.out_channels, 1, 1}));
    } else {
      out.zero_();
    }
    return out;
  }
  OnDevice on(x);
  const Tensor xc = x.contiguous(conv_format(p)), wc = weight.contiguous(conv_format(p));
  CudnnWorkspace ws{x.device(), Tensor()};
  conv2d_forward_cuda(cudnn_problem(p, xc, out), out.data_ptr(), xc.data_ptr(), wc.data_ptr(), ws.handle(), on.stream);
  if (bias.defined()) out.add_(bias.reshape({1, p.out_channels, 1, 1}));
  return out;
}

// dy: the output gradient, dense in the plan's layout.
Tensor conv_backward_input_cuda(const ConvPlan& p, const Tensor& dy, const Tensor& weight) {
  Tensor gx = empty_image(p.in_shape(), p.dtype, dy.device(), p.channels_last);
  if (gx.numel() == 0) return gx;
  if (dy.numel() == 0) return gx.zero_();
  OnDevice on(dy);
  const Tensor wc = weight.contiguous(conv_format(p));
  CudnnWorkspace ws{dy.device(), Tensor()};
  conv2d_backward_data_cuda(cudnn_problem(p, gx, dy), gx.data_ptr(), dy.data_ptr(), wc.data_ptr(), ws.handle(),
                            on.stream);
  return gx;
}

// The weight gradient comes out in the filter order cuDNN used and is returned laid out like the
// weight (channels-last weights get channels-last gradients, others contiguous ones).
Tensor conv_backward_weight_cuda(const ConvPlan& p, const Tensor& dy, const Tensor& x, const Shape& weight_shape,
                                 bool weight_channels_last) {
  Tensor dw = empty_image(weight_shape, p.dtype, dy.device(), p.channels_last);
  if (dw.numel() > 0 && (x.numel() == 0 || dy.numel() == 0)) {
    dw.zero_();
  } else if (dw.numel() > 0) {
    OnDevice on(dy);
    const Tensor xc = x.contiguous(conv_format(p));
    CudnnWorkspace ws{dy.device(), Tensor()};
    conv2d_backward_filter_cuda(cudnn_problem(p, xc, dy), dw.data_ptr(), xc.data_ptr(), dy.data_ptr(), ws.handle(),
                                on.stream);
  }
  return dw.contiguous(weight_channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}
#endif

// --- pooling ------------------------------------------------------------------------------------

// PyTorch's pooling output size: floor (or ceil) of the window count, where with ceil_mode the
// last window must still start inside the input or its left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = floor_div(span + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && out > 0 && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolArgs {
  Pair kernel, stride, padding, dilation;
};

// The checks every pooling op makes, and the geometry of x (3-d inputs count as one image).
Conv2dGeometry pool_geometry(const char* op, const Tensor& x, PoolArgs& a, bool ceil_mode) {
  ops::check_defined(op, x, "input");
  if (x.dim() != 3 && x.dim() != 4) {
    throw ShapeError(std::string(op) + ": input must be 3-d [C, H, W] or 4-d [N, C, H, W], got shape " +
                     shape_str(x.sizes()));
  }
  ops::check_floating(op, x, "input");
#if !defined(KILN_WITH_CUDA)
  if (!x.is_cpu()) ops::no_cuda_kernel(op);
#endif
  for (int i = 0; i < 2; ++i)
    if (a.stride[i] == 0) a.stride[i] = a.kernel[i];  // PyTorch's default: stride = kernel
  const std::string where = " (input " + shape_str(x.sizes()) + ")";
  if (a.kernel[0] <= 0 || a.kernel[1] <= 0) {
    throw Error(std::string(op) + ": kernel size must be positive, got " + pair_str(a.kernel) + where);
  }
  if (a.stride[0] <= 0 || a.stride[1] <= 0) {
    throw Error(std::string(op) + ": stride must be positive, got " + pair_str(a.stride) + where);
  }
  if (a.dilation[0] <= 0 || a.dilation[1] <= 0) {
    throw Error(std::string(op) + ": dilation must be positive, got " + pair_str(a.dilation) + where);
  }
  if (a.padding[0] < 0 || a.padding[1] < 0 || a.padding[0] > a.kernel[0] / 2 || a.padding[1] > a.kernel[1] / 2) {
    throw Error(std::string(op) + ": padding " + pair_str(a.padding) +
                " must be non-negative and at most half the kernel " + pair_str(a.kernel) + where);
  }
  const int64_t h = x.size(-2), w = x.size(-1);
  const int64_t oh = pool_out_size(h, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], ceil_mode);
  const int64_t ow = pool_out_size(w, a.kernel[1], a.stride[1], a.padding[1], a.dilation[1], ceil_mode);
  if (oh <= 0 || ow <= 0) {
    throw ShapeError(std::string(op) + ": output size " + std::to_string(oh) + "x" + std::to_string(ow) +
                     " is not positive (input " + shape_str(x.sizes()) + ", kernel " + pair_str(a.kernel) +
                     ", stride " + pair_str(a.stride) + ", padding " + pair_str(a.padding) + ", dilation " +
                     pair_str(a.dilation) + ")");
  }
  Conv2dGeometry g;
  g.batch = x.dim() == 4 ? x.size(0) : 1;
  g.channels = x.size(-3);
  g.in_h = h;
  g.in_w = w;
  g.out_h = oh;
  g.out_w = ow;
  g.window = {a.kernel[0],  a.kernel[1],  a.stride[0],   a.stride[1],
              a.padding[0], a.padding[1], a.dilation[0], a.dilation[1]};
  return g;
}

// x as a 4-d tensor: 3-d [C, H, W] inputs get a batch dim (a differentiable view).
Tensor as_batched(const Tensor& x) { return x.dim() == 3 ? x.unsqueeze(0) : x; }
Tensor as_input_rank(const Tensor& out, const Tensor& x) { return x.dim() == 3 ? out.squeeze(0) : out; }

// The input gradient of a pooling op, in x4's layout; `kernel(grad_in, grad)` fills it.
template <typename F> Tensor pool_grad(const Shape& x_shape, bool channels_last, const Tensor& grad, F&& kernel) {
  Tensor gx = empty_image(x_shape, grad.dtype(), grad.device(), channels_last);
  if (gx.numel() > 0) kernel(gx, grad);
  return gx;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  const char* op = "conv2d";
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
  if (weight.size(1) * groups != c) {
    std::string expects = std::to_string(weight.size(1) * groups);
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
  const int64_t ekh = dilation[0] * (kh - 1) + 1, ekw = dilation[1] * (kw - 1) + 1;
  const int64_t oh = floor_div(h + 2 * padding[0] - ekh, stride[0]) + 1;
  const int64_t ow = floor_div(w + 2 * padding[1] - ekw, stride[1]) + 1;
  if (oh <= 0 || ow <= 0) {
    throw ShapeError("conv2d: kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " (dilation " +
                     pair_str(dilation) + ", spans " + std::to_string(ekh) + "x" + std::to_string(ekw) +
                     ") is larger than the padded input " + std::to_string(h + 2 * padding[0]) + "x" +
                     std::to_string(w + 2 * padding[1]) + ": output size " + std::to_string(oh) + "x" +
                     std::to_string(ow) + " is not positive (" + shapes + ", padding " + pair_str(padding) + ")");
  }
#if defined(KILN_WITH_CUDA)
  if (!x.is_cpu() && !cuda::math_switches().cudnn_enabled) {
    throw DeviceError("conv2d: cuDNN is disabled (cuda::math_switches().cudnn_enabled) and kiln has no other CUDA "
                      "convolution (" + shapes + ")");
  }
#else
  if (!x.is_cpu()) ops::no_cuda_kernel(op);
#endif

  ConvPlan p;
  p.geo = {
      n, c, h, w, oh, ow, Window2d{kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]}};
  p.groups = groups;
  p.out_channels = cout;
  p.channels_last = is_channels_last(x);
  p.dtype = x.dtype();
  p.acc = conv_column_dtype(x.dtype());
  const Tensor bias_d = bias.defined() ? bias.detach() : Tensor();
  Tensor out;
  if (x.is_cpu()) {
    out = conv_forward(p, x.detach(), weight.detach(), bias_d);
  } else {
#if defined(KILN_WITH_CUDA)
    out = conv_forward_cuda(p, x.detach(), weight.detach(), bias_d);
#endif
  }

  if (needs_grad({&x, &weight, &bias})) {
    const bool need_x = needs_grad({&x}), need_w = needs_grad({&weight});
    Shape wshape = weight.sizes();
    const bool w_channels_last = is_channels_last(weight);
    // The input gradient needs the weight, the weight gradient needs the input; save only those.
    record_function(op, {x, weight, bias}, {out}, {need_w ? x : Tensor(), need_x ? weight : Tensor()},
                    [p, wshape, w_channels_last](const FunctionNode::Context& ctx) {
                      Tensor g = ctx.grads[0];
                      TensorList r(3);
#if defined(KILN_WITH_CUDA)
                      if (!g.is_cpu()) {
                        Tensor dy;
                        if (ctx.needs_input_grad[0] || ctx.needs_input_grad[1]) dy = g.contiguous(conv_format(p));
                        if (ctx.needs_input_grad[0]) r[0] = conv_backward_input_cuda(p, dy, ctx.saved_at(1));
                        if (ctx.needs_input_grad[1]) {
                          r[1] = conv_backward_weight_cuda(p, dy, ctx.saved_at(0), wshape, w_channels_last);
                        }
                        // kiln's reduction, as on the CPU: deterministic.
                        if (ctx.needs_input_grad[2]) r[2] = sum(g, {0, 2, 3});
                        return r;
                      }
#else
                      (void)w_channels_last;
#endif
                      Tensor gm;
                      if (ctx.needs_input_grad[0] || ctx.needs_input_grad[1]) {
                        gm = g.to(p.acc).contiguous(MemoryFormat::ChannelsLast);
                      }
                      if (ctx.needs_input_grad[0]) r[0] = conv_backward_input(p, gm, ctx.saved_at(1));
                      if (ctx.needs_input_grad[1]) r[1] = conv_backward_weight(p, gm, ctx.saved_at(0), wshape);
                      // The reduction kernel sums in double in a fixed order: deterministic.
                      if (ctx.needs_input_grad[2]) r[2] = sum(g, {0, 2, 3});
                      return r;
                    });
  }
  return out;
}

Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride, Pair padding, Pair dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  PoolArgs a{kernel_size, stride, padding, dilation};
  const Conv2dGeometry g = pool_geometry(op, x, a, ceil_mode);
  Tensor x4 = as_batched(x);
  const bool cl = is_channels_last(x4);
  const Shape out_shape{g.batch, g.channels, g.out_h, g.out_w};
  Tensor out = empty_image(out_shape, x.dtype(), x.device(), cl);
  // Indices into each input plane, kept for the backward (which scatters by them).
  Tensor indices = empty_image(out_shape, DType::Int64, x.device(), cl);
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      max_pool2d_forward_cpu(out.data_ptr(), indices.data_ptr<int64_t>(), image_strides(out), x4.data_ptr(),
                             image_strides(x4), x.dtype(), g);
    } else {
#if defined(KILN_WITH_CUDA)
      OnDevice on(x);
      max_pool2d_forward_cuda(out.data_ptr(), indices.data_ptr<int64_t>(), image_strides(out), x4.data_ptr(),
                              image_strides(x4), x.dtype(), g, on.stream);
#endif
    }
  }
  if (needs_grad({&x4})) {
    Shape xs = x4.sizes();
    record_function(op, {x4}, {out}, {indices}, [g, xs, cl](const FunctionNode::Context& ctx) {
      Tensor idx = ctx.saved_at(0);
      return TensorList{pool_grad(xs, cl, ctx.grads[0], [&](const Tensor& gx, const Tensor& gr) {
        if (gr.is_cpu()) {
          max_pool2d_backward_cpu(gx.data_ptr(), image_strides(gx), gr.data_ptr(), image_strides(gr),
                                  idx.data_ptr<int64_t>(), image_strides(idx), gr.dtype(), g);
        } else {
#if defined(KILN_WITH_CUDA)
          OnDevice on(gr);
          max_pool2d_backward_cuda(gx.data_ptr(), image_strides(gx), gr.data_ptr(), image_strides(gr),
                                   idx.data_ptr<int64_t>(), image_strides(idx), gr.dtype(), g, on.stream);
#endif
        }
      })};
    });
  }
  return as_input_rank(out, x);
}

Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride, Pair padding, bool ceil_mode,
                  bool count_include_pad) {
  const char* op = "avg_pool2d";
  PoolArgs a{kernel_size, stride, padding, {1, 1}};
  const Conv2dGeometry g = pool_geometry(op, x, a, ceil_mode);
  Tensor x4 = as_batched(x);
  const bool cl = is_channels_last(x4);
  Tensor out = empty_image({g.batch, g.channels, g.out_h, g.out_w}, x.dtype(), x.device(), cl);
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      avg_pool2d_forward_cpu(out.data_ptr(), image_strides(out), x4.data_ptr(), image_strides(x4), x.dtype(), g,
                             count_include_pad);
    } else {
#if defined(KILN_WITH_CUDA)
      OnDevice on(x);
      avg_pool2d_forward_cuda(out.data_ptr(), image_strides(out), x4.data_ptr(), image_strides(x4), x.dtype(), g,
                              count_include_pad, on.stream);
#endif
    }
  }
  if (needs_grad({&x4})) {
    Shape xs = x4.sizes();
    record_function(op, {x4}, {out}, {}, [g, xs, cl, count_include_pad](const FunctionNode::Context& ctx) {
      return TensorList{pool_grad(xs, cl, ctx.grads[0], [&](const Tensor& gx, const Tensor& gr) {
        if (gr.is_cpu()) {
          avg_pool2d_backward_cpu(gx.data_ptr(), image_strides(gx), gr.data_ptr(), image_strides(gr), gr.dtype(), g,
                                  count_include_pad);
        } else {
#if defined(KILN_WITH_CUDA)
          OnDevice on(gr);
          avg_pool2d_backward_cuda(gx.data_ptr(), image_strides(gx), gr.data_ptr(), image_strides(gr), gr.dtype(), g,
                                   count_include_pad, on.stream);
#endif
        }
      })};
    });
  }
  return as_input_rank(out, x);
}

Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size) {
  const char* op = "adaptive_avg_pool2d";
  ops::check_defined(op, x, "input");
  if (x.dim() != 3 && x.dim() != 4) {
    throw ShapeError("adaptive_avg_pool2d: input must be 3-d [C, H, W] or 4-d [N, C, H, W], got shape " +
                     shape_str(x.sizes()));
  }
  ops::check_floating(op, x, "input");
  if (output_size[0] <= 0 || output_size[1] <= 0) {
    throw ShapeError("adaptive_avg_pool2d: output size must be positive, got " + pair_str(output_size) + " (input " +
                     shape_str(x.sizes()) + ")");
  }
  if (x.size(-2) == 0 || x.size(-1) == 0) {
    throw ShapeError("adaptive_avg_pool2d: input " + shape_str(x.sizes()) + " has an empty spatial dim");
  }
#if !defined(KILN_WITH_CUDA)
  if (!x.is_cpu()) ops::no_cuda_kernel(op);
#endif
  Tensor x4 = as_batched(x);
  Conv2dGeometry g;
  g.batch = x4.size(0);
  g.channels = x4.size(1);
  g.in_h = x4.size(2);
  g.in_w = x4.size(3);
  g.out_h = output_size[0];
  g.out_w = output_size[1];
  const bool cl = is_channels_last(x4);
  Tensor out = empty_image({g.batch, g.channels, g.out_h, g.out_w}, x.dtype(), x.device(), cl);
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      adaptive_avg_pool2d_forward_cpu(out.data_ptr(), image_strides(out), x4.data_ptr(), image_strides(x4), x.dtype(),
                                      g);
    } else {
#if defined(KILN_WITH_CUDA)
      OnDevice on(x);
      adaptive_avg_pool2d_forward_cuda(out.data_ptr(), image_strides(out), x4.data_ptr(), image_strides(x4),
                                       x.dtype(), g, on.stream);
#endif
    }
  }
  if (needs_grad({&x4})) {
    Shape xs = x4.sizes();
    record_function(op, {x4}, {out}, {}, [g, xs, cl](const FunctionNode::Context& ctx) {
      return TensorList{pool_grad(xs, cl, ctx.grads[0], [&](const Tensor& gx, const Tensor& gr) {
        if (gr.is_cpu()) {
          adaptive_avg_pool2d_backward_cpu(gx.data_ptr(), image_strides(gx), gr.data_ptr(), image_strides(gr),
                                           gr.dtype(), g);
        } else {
#if defined(KILN_WITH_CUDA)
          OnDevice on(gr);
          adaptive_avg_pool2d_backward_cuda(gx.data_ptr(), image_strides(gx), gr.data_ptr(), image_strides(gr),
                                            gr.dtype(), g, on.stream);
#endif
        }
      })};
    });
  }
  return as_input_rank(out, x);
}

}  // namespace kiln
