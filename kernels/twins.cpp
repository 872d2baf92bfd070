// The kernel table: every kernels::NAME pair of twins (kernels/kernel.h), defined in this one file.
//
// This is the only C++ source of kiln_kernels compiled with KILN_WITH_CUDA (kernels/CMakeLists.txt),
// and so the only one whose object differs between a CPU build and a CUDA build: with the backend, a
// pair holds the address of NAME_cuda; without it, null, and the few CUDA-side queries that core and
// the tests call in either build get their CPU-build answers below. Every other object of the tree is
// identical in the two builds, which lets the compiler cache serve the second build from the first.
#include <type_traits>

// KILN_KERNEL defines here instead of declaring: it must be set before kernels/kernel.h is first read.
#if defined(KILN_WITH_CUDA)
#define KILN_CUDA_TWIN(name) &::kiln::name##_cuda
#else
#define KILN_CUDA_TWIN(name) nullptr
#endif
#define KILN_KERNEL(name)                                                                                  \
  static_assert(std::is_same_v<decltype(::kiln::name##_cpu), decltype(::kiln::name##_cuda)>,                \
                "kernel " #name ": its CPU and CUDA twins must have the same signature");                 \
  extern const ::kiln::Kernel<decltype(::kiln::name##_cpu)> name;                                          \
  const ::kiln::Kernel<decltype(::kiln::name##_cpu)> name { #name, &::kiln::name##_cpu, KILN_CUDA_TWIN(name) }

// Every header that declares a KILN_KERNEL. A header missing here leaves its kernels undefined, and
// the first program that calls one fails to link.
#include "kernels/attention.h"
#include "kernels/augment.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/factory.h"
#include "kernels/foreach.h"
#include "kernels/index.h"
#include "kernels/kernel.h"
#include "kernels/layer_norm.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "kernels/triangle.h"

namespace kiln {

#if defined(KILN_WITH_CUDA)
const bool kBuiltWithCuda = true;
#else
const bool kBuiltWithCuda = false;

// Without the backend no CUDA GEMM, convolution or attention ever ran: the records stay empty.
GemmComputeRecord last_gemm_compute_cuda() { return {}; }
ConvMathRecord last_conv_math_cuda() { return {}; }
int64_t attention_tc_launches() { return 0; }
int64_t attention_wgmma_launches() { return 0; }
int64_t attention_wgmma_tma_launches() { return 0; }
bool attention_wgmma_available() { return false; }
int64_t attention_tc_backward_launches() { return 0; }
int64_t attention_wgmma_backward_launches() { return 0; }
int64_t attention_fused_backward_launches() { return 0; }
int64_t attention_wgmma_dq_reduce_launches() { return 0; }
#endif

}  // namespace kiln
