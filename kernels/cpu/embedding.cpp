// CPU embedding lookup: rows are copied as raw bytes of their element size (no conversion), one
// row per index; indices are checked before anything is written.
#include <cstring>
#include <string>

#include "kernels/cpu/parallel.h"
#include "kernels/embedding.h"
#include "kernels/error.h"

namespace kiln {

void embedding_forward_cpu(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                           const KernelContext&) {
  if (k == 0 || weight.ndim != 2 || weight.sizes[1] == 0) return;
  const int64_t num = weight.sizes[0], dim = weight.sizes[1];
  for (int64_t i = 0; i < k; ++i) {
    if (indices[i] < 0 || indices[i] >= num) {
      throw IndexError("embedding: index " + std::to_string(indices[i]) + " is out of range for " +
                       std::to_string(num) + " embeddings (weight [" + std::to_string(num) + ", " +
                       std::to_string(weight.sizes[1]) + "], at flat index position " + std::to_string(i) + ")");
    }
  }
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

}  // namespace kiln
