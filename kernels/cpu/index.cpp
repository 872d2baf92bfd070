// CPU reference for index_select, gather and scatter_add. Indices are never wrapped: anything
// outside [0, size) is an IndexError. scatter_add parallelizes only over the dims other than `dim`,
// so every output element is accumulated by one thread in index order: race-free and deterministic.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"
#include "kernels/index.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

constexpr int64_t kGrain = 16384;

// Calls f(copy), where copy(out, o, in, i) moves element i of in to element o of out: the bits
// unchanged when the dtypes match (a NaN's payload too, as the CUDA twin moves them), else through
// double for a float output and through int64 otherwise, so int64 values stay exact.
template <typename W> struct CopyBits {
  void operator()(void* out, int64_t o, const void* in, int64_t i) const {
    static_cast<W*>(out)[o] = static_cast<const W*>(in)[i];
  }
};
template <typename F> void visit_copy(DType out_dtype, DType in_dtype, F&& f) {
  if (out_dtype == in_dtype) {
    switch (element_size(out_dtype)) {
      case 1: f(CopyBits<uint8_t>{}); return;
      case 2: f(CopyBits<uint16_t>{}); return;
      case 4: f(CopyBits<uint32_t>{}); return;
      case 8: f(CopyBits<uint64_t>{}); return;
      default: break;
    }
  }
  if (is_floating(out_dtype)) {
    f([out_dtype, in_dtype](void* out, int64_t o, const void* in, int64_t i) {
      store_as<double>(out, out_dtype, o, load_as<double>(in, in_dtype, i));
    });
  } else {
    f([out_dtype, in_dtype](void* out, int64_t o, const void* in, int64_t i) {
      store_as<int64_t>(out, out_dtype, o, load_as<int64_t>(in, in_dtype, i));
    });
  }
}

// scatter_add adds through double for float outputs and int64 otherwise.
template <typename F> void visit_add_type(DType out_dtype, F&& f) {
  if (is_floating(out_dtype)) {
    f.template operator()<double>();
  } else {
    f.template operator()<int64_t>();
  }
}

[[noreturn]] void throw_out_of_range(const char* op, int64_t idx, int dim, int64_t size) {
  throw IndexError(std::string(op) + ": index " + std::to_string(idx) + " is out of range for dimension " +
                   std::to_string(dim) + " of size " + std::to_string(size));
}

inline int64_t checked_index(const char* op, const StridedArg& index, int64_t off, int dim, int64_t size) {
  const int64_t idx = load_as<int64_t>(index.data, index.dtype, off);
  if (idx < 0 || idx >= size) throw_out_of_range(op, idx, dim, size);
  return idx;
}

}  // namespace

void index_select_cpu(const StridedArg& out_arg, const StridedArg& in_arg, int dim, const StridedArg& index_arg,
                      const KernelContext&) {
  const StridedArg out = at_least_1d(out_arg), in = at_least_1d(in_arg), index = at_least_1d(index_arg);
  const int64_t m = index.sizes[0];
  const int64_t size = in.sizes[dim];
  // The index is 1-D and usually short next to the output: check it once, keep input offsets.
  std::vector<int64_t> src_off(static_cast<size_t>(m));
  for (int64_t k = 0; k < m; ++k) {
    src_off[static_cast<size_t>(k)] =
        checked_index("index_select", index, k * index.strides[0], dim, size) * in.strides[dim];
  }
  // A third "operand" with stride 1 along dim and 0 elsewhere makes nd_loop hand us the coordinate
  // along dim without a division per element.
  int64_t in_strides[kMaxDims] = {}, coord_strides[kMaxDims] = {};
  for (int d = 0; d < in.ndim; ++d) in_strides[d] = d == dim ? 0 : in.strides[d];
  coord_strides[dim] = 1;
  const int64_t* strides[3] = {out.strides, in_strides, coord_strides};
  visit_copy(out.dtype, in.dtype, [&](auto copy) {
    cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_loop<3>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
        copy(out.data, off[0], in.data, off[1] + src_off[static_cast<size_t>(off[2])]);
      });
    });
  });
}

void gather_cpu(const StridedArg& out_arg, const StridedArg& in_arg, int dim, const StridedArg& index_arg,
                const KernelContext&) {
  const StridedArg out = at_least_1d(out_arg), in = at_least_1d(in_arg), index = at_least_1d(index_arg);
  const int64_t size = in.sizes[dim];
  int64_t in_strides[kMaxDims] = {};
  for (int d = 0; d < in.ndim; ++d) in_strides[d] = d == dim ? 0 : in.strides[d];
  const int64_t* strides[3] = {out.strides, in_strides, index.strides};
  visit_copy(out.dtype, in.dtype, [&](auto copy) {
    cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_loop<3>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
        const int64_t idx = checked_index("gather", index, off[2], dim, size);
        copy(out.data, off[0], in.data, off[1] + idx * in.strides[dim]);
      });
    });
  });
}

void scatter_add_cpu(const StridedArg& out_arg, int dim, const StridedArg& index_arg, const StridedArg& src_arg,
                     const KernelContext&) {
  const StridedArg out = at_least_1d(out_arg), index = at_least_1d(index_arg), src = at_least_1d(src_arg);
  // The outer loop runs over index's shape with `dim` removed.
  int64_t outer_sizes[kMaxDims] = {}, out_strides[kMaxDims] = {}, index_strides[kMaxDims] = {},
          src_strides[kMaxDims] = {};
  int outer_ndim = 0;
  for (int d = 0; d < index.ndim; ++d) {
    if (d == dim) continue;
    outer_sizes[outer_ndim] = index.sizes[d];
    out_strides[outer_ndim] = out.strides[d];
    index_strides[outer_ndim] = index.strides[d];
    src_strides[outer_ndim] = src.strides[d];
    ++outer_ndim;
  }
  int64_t outer = 1;
  for (int d = 0; d < outer_ndim; ++d) outer *= outer_sizes[d];
  const int64_t inner = index.sizes[dim];
  if (outer == 0 || inner == 0) return;
  const int64_t out_size = out.sizes[dim];
  const int64_t out_dim_stride = out.strides[dim], index_dim_stride = index.strides[dim],
                src_dim_stride = src.strides[dim];
  const int64_t* strides[3] = {out_strides, index_strides, src_strides};
  visit_add_type(out.dtype, [&]<typename C>() {
    cpu::parallel_for(outer, cpu::grain_for(inner), [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_loop<3>(outer_ndim, outer_sizes, strides, b0, e0, [&](const int64_t* off) {
        for (int64_t k = 0; k < inner; ++k) {
          const int64_t idx = checked_index("scatter_add", index, off[1] + k * index_dim_stride, dim, out_size);
          const int64_t o = off[0] + idx * out_dim_stride;
          const C add = load_as<C>(src.data, src.dtype, off[2] + k * src_dim_stride);
          store_as<C>(out.data, out.dtype, o, load_as<C>(out.data, out.dtype, o) + add);
        }
      });
    });
  });
}

const char* index_check_op_name(IndexCheckOp op) {
  switch (op) {
    case IndexCheckOp::IndexSelect: return "index_select";
    case IndexCheckOp::Gather: return "gather";
    case IndexCheckOp::ScatterAdd: return "scatter_add";
    case IndexCheckOp::Embedding: return "embedding";
    case IndexCheckOp::CrossEntropy: return "cross_entropy";
    case IndexCheckOp::Multinomial: return "multinomial";
    case IndexCheckOp::None: break;
  }
  return "?";
}

}  // namespace kiln
