// Which attention calls the CUDA twin's tensor-core kernels take (kernels/cuda/attention_tc.cu,
// attention_tc_backward.cu). Plain host logic over the arguments, compiled in every build, so the
// CPU tests that run those kernels on the emulator (tests/kernels/test_attention_tc_simt.cpp) can
// check that their problems are ones the kernels would be given.
#include <cstdint>

#include "kernels/attention.h"

namespace kiln {
namespace {

bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

}  // namespace

bool attention_tc_fits(const AttentionArgs& a, const void* q, const void* k, const void* v) {
  const bool half = a.dtype == DType::Float16 || a.dtype == DType::BFloat16;
  const bool dims = a.E == a.Ev && (a.E == 64 || a.E == 128);
  // Pairs are read as 32-bit words: even row strides and 4-byte aligned bases (batch strides too).
  bool even = a.q_row_stride % 2 == 0 && a.k_row_stride % 2 == 0 && a.v_row_stride % 2 == 0;
  for (int d = 0; d < a.layout.ndim; ++d) {
    even = even && a.layout.q[d] % 2 == 0 && a.layout.k[d] % 2 == 0 && a.layout.v[d] % 2 == 0;
  }
  return a.tensor_cores && half && dims && a.mask == nullptr && even && aligned4(q) && aligned4(k) && aligned4(v) &&
         a.batch <= 65535;
}

bool attention_tc_backward_fits(const AttentionArgs& a, const void* q, const void* k, const void* v,
                                const void* dout) {
  // dO is staged as 32-bit words too: out's layout (which dout shares) even, dout 4-byte aligned.
  bool even = a.o_row_stride % 2 == 0;
  for (int d = 0; d < a.layout.ndim; ++d) even = even && a.layout.o[d] % 2 == 0;
  return attention_tc_fits(a, q, k, v) && even && aligned4(dout);
}

}  // namespace kiln
