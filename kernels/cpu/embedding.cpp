// CPU embedding lookup and its backward. The lookup copies rows as raw bytes of their element size
// (no conversion), one row per index; the backward sums gradient rows by index value in the order of
// kernels/embedding_plan.h, as the CUDA twin does. Both check every index before they write.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/embedding.h"
#include "kernels/embedding_plan.h"
#include "kernels/error.h"

namespace kiln {
namespace {

void check_indices(const char* op, const int64_t* indices, int64_t k, int64_t num, int64_t dim) {
  for (int64_t i = 0; i < k; ++i) {
    if (indices[i] < 0 || indices[i] >= num) {
      throw IndexError(std::string(op) + ": index " + std::to_string(indices[i]) + " is out of range for " +
                       std::to_string(num) + " embeddings (weight [" + std::to_string(num) + ", " +
                       std::to_string(dim) + "], at flat index position " + std::to_string(i) + ")");
    }
  }
}

// The sums of embedding_plan: each chunk's pieces over all columns at once (the column loop is the
// inner one, so it vectorizes; each column still adds its rows in the sorted order), then the
// values that cross chunks, by the chunk that owns them.
template <typename T, typename Acc>
void embedding_backward_sums(T* gw, const T* g, const uint32_t* keys, const uint32_t* rows, int64_t k, int64_t num,
                             int64_t dim) {
  using namespace embedding_plan;
  const SortedKeys s{keys, k, static_cast<uint32_t>(num)};
  const int64_t chunks = chunk_count(k);
  std::vector<Acc> head(static_cast<size_t>(chunks * dim)), tail(static_cast<size_t>(chunks * dim));
  auto add_row = [&](uint32_t key, const Acc* acc) {
    T* out = gw + static_cast<int64_t>(key) * dim;
    for (int64_t d = 0; d < dim; ++d) out[d] = static_cast<T>(static_cast<Acc>(out[d]) + acc[d]);
  };
  const int64_t grain = cpu::grain_for(kChunkRows * dim);
  cpu::parallel_for(chunks, grain, [&](int64_t, int64_t c0, int64_t c1) {
    std::vector<Acc> acc(static_cast<size_t>(dim));
    for (int64_t c = c0; c < c1; ++c) {
      for_each_piece(s, c, [&](int64_t b, int64_t e, uint32_t key, Piece p) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        for (int64_t r = b; r < e; ++r) {
          const T* src = g + static_cast<int64_t>(rows[r]) * dim;
          for (int64_t d = 0; d < dim; ++d) acc[static_cast<size_t>(d)] += static_cast<Acc>(src[d]);
        }
        if (p == Piece::Whole) {
          add_row(key, acc.data());
        } else {
          std::copy(acc.begin(), acc.end(), (p == Piece::Head ? head : tail).begin() + c * dim);
        }
      });
    }
  });
  cpu::parallel_for(chunks, grain, [&](int64_t, int64_t c0, int64_t c1) {
    std::vector<Acc> acc(static_cast<size_t>(dim));
    for (int64_t c = c0; c < c1; ++c) {
      uint32_t key = 0;
      if (!owns_value(s, c, &key)) continue;
      std::copy(head.begin() + c * dim, head.begin() + (c + 1) * dim, acc.begin());
      for (int64_t c2 = c + 1;; ++c2) {
        for (int64_t d = 0; d < dim; ++d) acc[static_cast<size_t>(d)] += tail[static_cast<size_t>(c2 * dim + d)];
        if (value_ends_in(s, c2, key)) break;
      }
      add_row(key, acc.data());
    }
  });
}

}  // namespace

void embedding_forward_cpu(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                           const KernelContext&) {
  if (k == 0 || weight.ndim != 2 || weight.sizes[1] == 0) return;
  const int64_t num = weight.sizes[0], dim = weight.sizes[1];
  check_indices("embedding", indices, k, num, dim);
  const size_t es = element_size(weight.dtype);
  const auto* w = static_cast<const unsigned char*>(weight.data);
  auto* o = static_cast<unsigned char*>(out);
  const bool dense_rows = weight.strides[1] == 1;
  cpu::parallel_for(k, cpu::grain_for(dim), [&](int64_t, int64_t b0, int64_t e0) {
    for (int64_t i = b0; i < e0; ++i) {
      const unsigned char* row = w + static_cast<size_t>(indices[i] * weight.strides[0]) * es;
      unsigned char* dst = o + static_cast<size_t>(i * dim) * es;
      if (dense_rows) {
        std::memcpy(dst, row, static_cast<size_t>(dim) * es);
      } else {
        for (int64_t j = 0; j < dim; ++j) {
          std::memcpy(dst + static_cast<size_t>(j) * es, row + static_cast<size_t>(j * weight.strides[1]) * es, es);
        }
      }
    }
  });
}

void embedding_backward_cpu(void* grad_weight, const void* grad, DType dtype, const int64_t* indices, int64_t k,
                            int64_t num, int64_t dim, const KernelContext&) {
  const char* op = "embedding backward";
  if (k >= kEmbeddingBackwardMaxRows || num >= kEmbeddingBackwardMaxRows) {
    throw ShapeError(std::string(op) + ": " + std::to_string(k) + " positions and " + std::to_string(num) +
                     " embeddings must each be below 2^31");
  }
  if (!is_floating(dtype)) {
    throw DTypeError(std::string(op) + ": the gradient must be a floating type, got " + dtype_name(dtype));
  }
  if (k == 0 || dim == 0) return;
  check_indices(op, indices, k, num, dim);
  // Sorting (value, position) pairs packed in 64 bits orders positions by value and, within a
  // value, ascending: the stable order CUB's radix sort gives the CUDA twin.
  std::vector<uint64_t> pairs(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) pairs[static_cast<size_t>(i)] = static_cast<uint64_t>(indices[i]) << 32 | static_cast<uint64_t>(i);
  std::sort(pairs.begin(), pairs.end());
  std::vector<uint32_t> keys(static_cast<size_t>(k)), rows(static_cast<size_t>(k));
  for (size_t i = 0; i < pairs.size(); ++i) {
    keys[i] = static_cast<uint32_t>(pairs[i] >> 32);
    rows[i] = static_cast<uint32_t>(pairs[i]);
  }
  switch (dtype) {
    case DType::Float32:
      embedding_backward_sums<float, float>(static_cast<float*>(grad_weight), static_cast<const float*>(grad),
                                            keys.data(), rows.data(), k, num, dim);
      break;
    case DType::Float64:
      embedding_backward_sums<double, double>(static_cast<double*>(grad_weight), static_cast<const double*>(grad),
                                              keys.data(), rows.data(), k, num, dim);
      break;
    case DType::Float16:
      embedding_backward_sums<Half, float>(static_cast<Half*>(grad_weight), static_cast<const Half*>(grad),
                                           keys.data(), rows.data(), k, num, dim);
      break;
    default:
      embedding_backward_sums<BFloat16, float>(static_cast<BFloat16*>(grad_weight),
                                               static_cast<const BFloat16*>(grad), keys.data(), rows.data(), k,
                                               num, dim);
      break;
  }
}

}  // namespace kiln
