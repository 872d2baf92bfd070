// Kernel-argument building and shared checks for core/ops.
#include "core/ops/helpers.h"

#include <algorithm>
#include <numeric>

#include "core/cuda/runtime.h"
#include "kernels/error.h"

namespace kiln::ops {

StridedArg make_arg(const Tensor& t) {
  StridedArg a;
  if (t.dim() > kMaxDims) {
    throw ShapeError("kiln supports at most " + std::to_string(kMaxDims) + " dimensions in a kernel, got " +
                     std::to_string(t.dim()) + " (shape " + shape_str(t.sizes()) + ")");
  }
  a.data = t.data_ptr();
  a.dtype = t.dtype();
  a.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = t.sizes()[static_cast<size_t>(d)];
    a.strides[d] = t.strides()[static_cast<size_t>(d)];
  }
  return a;
}

StridedArg make_arg(const Tensor& t, const Shape& shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxDims) {
    throw ShapeError("kiln supports at most " + std::to_string(kMaxDims) + " dimensions in a kernel, got shape " +
                     shape_str(shape));
  }
  StridedArg a;
  a.data = t.data_ptr();
  a.dtype = t.dtype();
  a.ndim = static_cast<int>(shape.size());
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = shape[static_cast<size_t>(d)];
    int64_t td = d - lead;
    if (td < 0 || t.sizes()[static_cast<size_t>(td)] == 1) {
      a.strides[d] = 0;
    } else {
      a.strides[d] = t.strides()[static_cast<size_t>(td)];
    }
  }
  return a;
}

Operand make_operand(const Tensor& t, const Shape& shape) {
  Operand o;
  o.arg = make_arg(t, shape);
  return o;
}

Operand scalar_operand(const Scalar& s) {
  Operand o;
  o.is_scalar = true;
  o.scalar = s.to_double();
  return o;
}

void collapse_dims(std::vector<StridedArg*> args, bool allow_reorder) {
  if (args.empty()) return;
  StridedArg& first = *args[0];
  const int nd = first.ndim;
  // Keep dims of size != 1.
  std::vector<int> dims;
  for (int d = 0; d < nd; ++d)
    if (first.sizes[d] != 1) dims.push_back(d);
  if (allow_reorder) {
    // Outermost first: order by the first arg's stride (descending), stable for ties.
    std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) {
      int64_t sa = first.strides[a] < 0 ? -first.strides[a] : first.strides[a];
      int64_t sb = first.strides[b] < 0 ? -first.strides[b] : first.strides[b];
      return sa > sb;
    });
  }
  // Merge dim i into the previous one when it is contiguous with it in every arg.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(args.size());
  for (int d : dims) {
    bool merge = !sizes.empty();
    if (merge) {
      for (size_t a = 0; a < args.size(); ++a) {
        if (strides[a].back() != args[a]->strides[d] * args[a]->sizes[d]) {
          merge = false;
          break;
        }
      }
    }
    if (merge) {
      sizes.back() *= first.sizes[d];
      for (size_t a = 0; a < args.size(); ++a) strides[a].back() = args[a]->strides[d];
    } else {
      sizes.push_back(first.sizes[d]);
      for (size_t a = 0; a < args.size(); ++a) strides[a].push_back(args[a]->strides[d]);
    }
  }
  if (sizes.empty()) {  // all size 1: one element
    sizes.push_back(1);
    for (auto& s : strides) s.push_back(1);
  }
  for (size_t a = 0; a < args.size(); ++a) {
    args[a]->ndim = static_cast<int>(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
      args[a]->sizes[d] = sizes[d];
      args[a]->strides[d] = strides[a][d];
    }
  }
}

Shape strides_like(const Shape& shape, const Tensor& like) {
  if (like.defined() && like.sizes() == shape && like.is_non_overlapping_and_dense() && !like.is_contiguous()) {
    return like.strides();
  }
  return contiguous_strides(shape);
}

Device common_device(const char* op, const std::vector<const Tensor*>& tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      throw DeviceError(std::string(op) + ": expected all tensors on one device, got " + first->device().str() +
                        " and " + t->device().str());
    }
  }
  return first ? first->device() : Device::cpu();
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  if (!t.defined()) throw Error(std::string(op) + ": " + what + " is an undefined tensor");
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  if (!t.is_floating_point()) {
    throw DTypeError(std::string(op) + ": " + what + " must be a floating point tensor, got " + dtype_name(t.dtype()) +
                     " (shape " + shape_str(t.sizes()) + ")");
  }
}

void no_cuda_kernel(const char* op) {
  throw DeviceError(std::string(op) + ": this op has no CUDA kernel in this build of kiln");
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

std::string dtype_str(DType t) { return dtype_name(t); }

}  // namespace kiln::ops

namespace kiln::ops {

void copy_raw(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  common_device("copy_", {&dst, &src});
  StridedArg o = make_arg(dst);
  Operand i = make_operand(src, dst.sizes());
  collapse_dims({&o, &i.arg});
  const DType compute = compute_dtype_for(dst.dtype() == DType::Float64 || src.dtype() == DType::Float64
                                              ? DType::Float64
                                              : (is_floating(dst.dtype()) || is_floating(src.dtype()) ? DType::Float32
                                                                                                      : DType::Int64));
  if (dst.is_cpu()) {
    unary_cpu(o, i, UnaryOp::Copy, compute, 0, 0);
    return;
  }
#if defined(KILN_WITH_CUDA)
  const int dev = dst.device().index;
  cuda::DeviceGuard guard(dev);
  unary_cuda(o, i, UnaryOp::Copy, compute, 0, 0, cuda::current_stream(dev));
#else
  no_cuda_kernel("copy_");
#endif
}

std::vector<int64_t> batch_offsets(const Tensor& x, int64_t x_batch_dims, const Shape& batch) {
  const int64_t nb = shape_numel(batch);
  const int64_t lead = static_cast<int64_t>(batch.size()) - x_batch_dims;
  std::vector<int64_t> offs(static_cast<size_t>(nb));
  for (int64_t n = 0; n < nb; ++n) {
    int64_t rem = n, off = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[static_cast<size_t>(d)];
      rem /= batch[static_cast<size_t>(d)];
      int64_t xd = d - lead;
      if (xd >= 0 && x.size(xd) != 1) off += idx * x.stride(xd);
    }
    offs[static_cast<size_t>(n)] = off;
  }
  return offs;
}

Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->dtype = x.dtype();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->version = x.impl()->version;
  impl->is_view = true;
  return Tensor(std::move(impl));
}

}  // namespace kiln::ops
