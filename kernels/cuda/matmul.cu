// CUDA GEMM through cuBLASLt. kiln's matrices are row-major and cuBLASLt's column-major, so
// C = op(A) op(B) runs as C^T = op(B)^T op(A)^T: the operands swap places and keep their own
// transpose flags, with no copy. A plan (descriptors plus the heuristic's first algorithm) is built
// once per problem, pointer alignment included, and reused; runs of batches whose offsets step
// evenly become one strided-batched call. The epilogues (GemmEpilogue) are cuBLASLt's: in its
// column-major terms D is kiln's C^T, n rows, so its per-row bias (CUBLASLT_EPILOGUE_BIAS,
// _GELU_AUX_BIAS) or bias gradient (a sum along D's row: _DGELU_BGRAD) is kiln's per-column one, and
// the aux matrix H^T has D's shape. BiasGradA sums kiln's op(A) over k; kiln's A is cuBLASLt's B,
// so that is CUBLASLT_EPILOGUE_BGRADB, one value per column of D (per row of kiln's C).
#include <cublasLt.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/matmul.h"

namespace kiln {
namespace {

using namespace cuda_detail;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

std::string status_text(cublasStatus_t st) {
  return std::string(cublasLtGetStatusName(st)) + " (" + cublasLtGetStatusString(st) + ")";
}

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw DeviceError(std::string("matmul: ") + what + " failed: " + status_text(st));
}

cublasLtHandle_t create_lt_handle() {
  cublasLtHandle_t h = nullptr;
  check(cublasLtCreate(&h), "cublasLtCreate");
  return h;
}

// How a dtype maps onto cuBLASLt: storage type, compute type and the type of alpha and beta.
struct LtTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

LtTypes lt_types(DType t, bool allow_tf32) {
  switch (t) {
    case DType::Float32:
      return {CUDA_R_32F, allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    default: break;
  }
  throw DTypeError(std::string("matmul: unsupported dtype ") + dtype_name(t) + " on CUDA");
}

// The largest power of two up to 256 dividing every address of a batch (base + i * stride elements):
// cuBLASLt assumes 256-byte alignment unless told otherwise, and views and batch offsets break it.
uint32_t alignment_of(const void* base, int64_t stride, size_t elem_size) {
  uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base)) |
                  static_cast<uint64_t>(stride) * static_cast<uint64_t>(elem_size);
  if (bits == 0) return 256;
  const uint64_t low = bits & (~bits + 1);
  return static_cast<uint32_t>(low < 256 ? low : 256);
}

// One cuBLASLt call: `count` products whose A, B and C step by fixed element strides.
struct Problem {
  DType dtype;
  bool ta, tb, tf32;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t count;
  int64_t stride_a, stride_b, stride_c;
  uint32_t align_a, align_b, align_c;
  size_t workspace_bytes;
  int device;
  // An epilogue: H's leading dimension and the alignments of H and the bias or its gradient (part of
  // the plan); the pointers themselves are set at each call (the heuristic reads the first call's).
  GemmEpilogue epilogue = GemmEpilogue::None;
  int64_t ldaux = 0;
  uint32_t align_aux = 0, align_bias = 0;
  const void* bias = nullptr;  // the bias, or the bias gradient written
  void* aux = nullptr;
};

using PlanKey = std::array<int64_t, 23>;

PlanKey key_of(const Problem& p) {
  return {p.device,   static_cast<int64_t>(p.dtype), p.ta,       p.tb,       p.tf32,     p.m,       p.n,
          p.k,        p.lda,    p.ldb,               p.ldc,      p.count,    p.stride_a, p.stride_b, p.stride_c,
          p.align_a,  p.align_b, p.align_c,          static_cast<int64_t>(p.workspace_bytes),
          static_cast<int64_t>(p.epilogue), p.ldaux, p.align_aux, p.align_bias};
}

// The epilogue's pointers live in the shared descriptor: each call sets them and enqueues under
// this lock (cublasLtMatmul reads the descriptor when it is called, not when the GEMM runs).
std::mutex& epilogue_mutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}

// Sets the bias (or bias gradient) pointer, and the aux pointer where the epilogue has one.
void set_epilogue_pointers(cublasLtMatmulDesc_t op, const void* bias, void* aux) {
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
        "cublasLtMatmulDescSetAttribute (bias pointer)");
  if (aux == nullptr) return;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
        "cublasLtMatmulDescSetAttribute (aux pointer)");
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::BiasGradA: return CUBLASLT_EPILOGUE_BGRADB;  // cuBLASLt's B is kiln's A
    case GemmEpilogue::BiasGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::DGeluBgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case GemmEpilogue::None: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Descriptors and algorithm of one Problem. In cuBLASLt's terms A is kiln's B, B is kiln's A, and
// C (also D) is C^T. Immutable once built, so threads share it.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // read back from `op` (last_gemm_compute_cuda)

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // host memory only
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t count,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
        "cublasLtMatrixLayoutCreate");
  if (count > 1) {
    const int32_t batch = static_cast<int32_t>(count);
    cublasStatus_t st =
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                            sizeof(stride));
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatrixLayoutDestroy(layout);
      check(st, "cublasLtMatrixLayoutSetAttribute (batch)");
    }
  }
  return layout;
}

std::string problem_str(const Problem& p) {
  return std::string(dtype_name(p.dtype)) + " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
         " k=" + std::to_string(p.k) + (p.ta ? " A^T" : "") + (p.tb ? " B^T" : "") + " batch=" +
         std::to_string(p.count) + (p.tf32 ? " tf32" : "");
}

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const Problem& p) {
  const LtTypes types = lt_types(p.dtype, p.tf32);
  auto plan = std::make_unique<Plan>();
  check(cublasLtMatmulDescCreate(&plan->op, types.compute, types.scale), "cublasLtMatmulDescCreate");
  // What the descriptor holds, not what was asked: the debugging hook reports the library's view.
  size_t written = 0;
  check(cublasLtMatmulDescGetAttribute(plan->op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &plan->compute,
                                       sizeof(plan->compute), &written),
        "cublasLtMatmulDescGetAttribute (compute type)");
  const cublasOperation_t op_a = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is kiln's B
  const cublasOperation_t op_b = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
        "cublasLtMatmulDescSetAttribute (transa)");
  check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
        "cublasLtMatmulDescSetAttribute (transb)");
  if (p.epilogue != GemmEpilogue::None) {
    const cublasLtEpilogue_t epilogue = lt_epilogue(p.epilogue);
    check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
          "cublasLtMatmulDescSetAttribute (epilogue)");
    if (gemm_epilogue_has_aux(p.epilogue)) {
      const int64_t ldaux = p.ldaux;
      check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof(ldaux)),
            "cublasLtMatmulDescSetAttribute (aux leading dimension)");
    }
    set_epilogue_pointers(plan->op, p.bias, p.aux);  // the heuristic reads their alignment
  }
  // Stored shapes (before op): kiln's B is k x n row-major, i.e. n x k column-major (k x n when
  // transposed); kiln's A likewise with m; C^T is n x m.
  plan->a = make_layout(types.data, p.tb ? p.k : p.n, p.tb ? p.n : p.k, p.ldb, p.count, p.stride_b);
  plan->b = make_layout(types.data, p.ta ? p.m : p.k, p.ta ? p.k : p.m, p.lda, p.count, p.stride_a);
  plan->c = make_layout(types.data, p.n, p.m, p.ldc, p.count, p.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t max_ws = p.workspace_bytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)),
        "cublasLtMatmulPreferenceSetAttribute (workspace)");
  const uint32_t align[4] = {p.align_b, p.align_a, p.align_c, p.align_c};  // cuBLASLt's A, B, C, D
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    check(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof(align[i])),
          "cublasLtMatmulPreferenceSetAttribute (alignment)");
  }
  // Split-k partial sums are staged in the workspace and reduced there, never added into C in
  // place; for float16/bfloat16 only in float32 (the output-type scheme would sum in 16 bits, and
  // kiln accumulates in float). Algorithms without split-k are always allowed.
  const bool half = p.dtype == DType::Float16 || p.dtype == DType::BFloat16;
  const uint32_t mask = half ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                             : (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)),
        "cublasLtMatmulPreferenceSetAttribute (reduction scheme)");
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int returned = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->c, plan->c, pref, 1, &result,
                                       &returned),
        "cublasLtMatmulAlgoGetHeuristic");
  if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    throw DeviceError("matmul: cuBLASLt has no algorithm for " + problem_str(p) + " (alignment A " +
                      std::to_string(p.align_a) + ", B " + std::to_string(p.align_b) + ", C " +
                      std::to_string(p.align_c) + " bytes; workspace " + std::to_string(p.workspace_bytes) +
                      " bytes)" + (returned > 0 ? ": " + status_text(result.state) : std::string()));
  }
  plan->algo = result.algo;  // needs result.workspaceSize <= the workspace limit, which every call passes
  return plan;
}

// Plans live for the process: leaked on purpose so that no cuBLASLt call runs during static
// destruction, after the library may be gone.
struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

const Plan& get_plan(cublasLtHandle_t handle, const Problem& p) {
  static PlanCache* cache = new PlanCache;
  const PlanKey key = key_of(p);
  std::lock_guard<std::mutex> lock(cache->mutex);
  auto it = cache->plans.find(key);
  if (it == cache->plans.end()) it = cache->plans.emplace(key, make_plan(handle, p)).first;
  return *it->second;
}

// The last GEMM of this thread (last_gemm_compute_cuda). Per thread, as ops run on their caller's.
thread_local GemmComputeRecord t_last_gemm;

GemmComputeType compute_type_of(cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_32F: return GemmComputeType::Float32;
    case CUBLAS_COMPUTE_32F_FAST_TF32: return GemmComputeType::Float32FastTF32;
    case CUBLAS_COMPUTE_64F: return GemmComputeType::Float64;
    default: return GemmComputeType::Other;
  }
}

// The batches from `first` on that one strided call covers: all three offsets step by a fixed
// stride (0 for a broadcast A or B; never 0 for C, whose products must not overlap).
int64_t run_length(const GemmBatch& batch, int64_t first, int64_t (&stride)[3]) {
  const int64_t* offsets[3] = {batch.a_offsets, batch.b_offsets, batch.c_offsets};
  for (int64_t& s : stride) s = 0;
  if (first + 1 >= batch.count) return 1;
  auto at = [&](int x, int64_t i) { return gemm_batch_offset(offsets[x], i); };
  for (int x = 0; x < 3; ++x) stride[x] = at(x, first + 1) - at(x, first);
  if (stride[0] < 0 || stride[1] < 0 || stride[2] <= 0) {
    for (int64_t& s : stride) s = 0;
    return 1;
  }
  int64_t len = 2;
  // At most 65535 products a call: cuBLASLt has been seen to find no algorithm beyond the grid's
  // z limit (TensorFlow and PyTorch split such batches too); the rest gets a call of its own.
  while (first + len < batch.count && len < 65535) {
    bool same = true;
    for (int x = 0; x < 3 && same; ++x) {
      same = at(x, first + len) - at(x, first + len - 1) == stride[x];
    }
    if (!same) break;
    ++len;
  }
  return len;
}

}  // namespace

void gemm_cuda(const GemmArgs& g, const KernelContext& ctx) {
  const DType dtype = g.dtype;
  const bool trans_a = g.trans_a, trans_b = g.trans_b, allow_tf32 = g.allow_tf32;
  const int64_t m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  const double alpha = g.alpha, beta = g.beta;
  const void *a = g.a, *b = g.b;
  void* c = g.c;
  const GemmBatch& batch = g.batch;
  (void)lt_types(dtype, allow_tf32);  // rejects other dtypes before anything runs
  check_gemm_epilogue(g);
  const bool epilogue = g.epilogue != GemmEpilogue::None, has_aux = gemm_epilogue_has_aux(g.epilogue);
  if (epilogue && (dtype == DType::Float64 || (has_aux && g.ldaux % 8 != 0))) {
    throw Error("gemm: cuBLASLt's epilogues take float32, float16 or bfloat16, and the GELU ones ldaux a multiple "
                "of 8; got " + std::string(dtype_name(dtype)) + (has_aux ? ", ldaux " + std::to_string(g.ldaux) : ""));
  }
  if (batch.count <= 0 || m <= 0 || n <= 0) return;
  const Stream stream = ctx.stream;
  const cudaStream_t s = raw_stream(stream);
  if (k <= 0) {
    matmul_device::scale_outputs(dtype, m, n, beta, c, ldc, batch, StreamLaunch{s, "matmul"});
    return;
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    throw ShapeError("matmul: cuBLASLt takes matrix dims up to 2^31 - 1, got m=" + std::to_string(m) +
                     " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  // 32 MiB: NVIDIA's recommendation for Hopper. A stream-ordered block from the caller, so graph
  // capture takes it from the capture pool and two streams never share one.
  const size_t workspace_bytes = kWorkspaceBytes;
  void* workspace = ctx.workspace(workspace_bytes);
  const int device = current_device_checked("matmul");
  cublasLtHandle_t handle = thread_handle<cublasLtHandle_t, create_lt_handle>(device, stream, "matmul");
  const bool tf32 = dtype == DType::Float32 && allow_tf32;
  // alpha and beta in the scale type, read on the host when cublasLtMatmul is called.
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const bool f64 = dtype == DType::Float64;
  const void* alpha_p = f64 ? static_cast<const void*>(&alpha) : static_cast<const void*>(&alpha_f);
  const void* beta_p = f64 ? static_cast<const void*>(&beta) : static_cast<const void*>(&beta_f);
  const size_t es = element_size(dtype);
  const auto ies = static_cast<int64_t>(es);
  for (int64_t i = 0; i < batch.count;) {
    int64_t stride[3];
    const int64_t len = run_length(batch, i, stride);
    const char* pa = static_cast<const char*>(a) + gemm_batch_offset(batch.a_offsets, i) * ies;
    const char* pb = static_cast<const char*>(b) + gemm_batch_offset(batch.b_offsets, i) * ies;
    char* pc = static_cast<char*>(c) + gemm_batch_offset(batch.c_offsets, i) * ies;
    Problem p{dtype,
              trans_a,
              trans_b,
              tf32,
              m,
              n,
              k,
              lda,
              ldb,
              ldc,
              len,
              stride[0],
              stride[1],
              stride[2],
              alignment_of(pa, stride[0], es),
              alignment_of(pb, stride[1], es),
              alignment_of(pc, stride[2], es),
              workspace_bytes,
              device};
    if (epilogue) {
      p.epilogue = g.epilogue;
      p.ldaux = has_aux ? g.ldaux : 0;
      p.align_aux = has_aux ? alignment_of(g.aux, 0, es) : 0;
      const bool reads_bias = g.epilogue == GemmEpilogue::Bias || g.epilogue == GemmEpilogue::BiasGeluAux;
      p.bias = reads_bias ? g.bias : g.bias_grad;
      p.align_bias = alignment_of(p.bias, 0, es);
      p.aux = has_aux ? g.aux : nullptr;
    }
    const Plan& plan = get_plan(handle, p);
    std::unique_lock<std::mutex> lock;
    if (epilogue) {
      lock = std::unique_lock<std::mutex>(epilogue_mutex());
      set_epilogue_pointers(plan.op, p.bias, p.aux);
    }
    // cuBLASLt's A is kiln's B and its B is kiln's A; C and D are both kiln's C (beta == 0 does
    // not read it).
    check(cublasLtMatmul(handle, plan.op, alpha_p, pb, plan.a, pa, plan.b, beta_p, pc, plan.c, pc, plan.c, &plan.algo,
                         workspace, workspace_bytes, s),
          "cublasLtMatmul");
    t_last_gemm = {compute_type_of(plan.compute), static_cast<int>(plan.compute), dtype};
    i += len;
  }
}

GemmComputeRecord last_gemm_compute_cuda() { return t_last_gemm; }

}  // namespace kiln
