// The op test table (ARCHITECTURE.md section 5): one row per op with sample inputs, dtypes,
// differentiable inputs, tolerances, a float64 reference and error cases, checked by the CPU runner;
// the CUDA parity runner reuses the rows with the device switched and gpu_bench times their bench
// cases. The row is the one place for an op's checks: its CUDA tolerance and bench shapes live on
// it, never in lists keyed by row names elsewhere.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/kiln.h"

namespace kiln::test {

// One input set. make(dtype, device) builds the inputs; tensors that the op takes as floating
// data get `dtype`, index/mask/bool arguments keep their own. Non-contiguous layouts are made
// after the cast, so every dtype sees the same layout.
struct Sample {
  std::string name;
  std::function<TensorList(DType, Device)> make;
};

struct ErrorCase {
  std::string what;                   // what is wrong, for the failure message
  std::function<void()> call;         // must throw kiln::Error
  std::vector<std::string> mentions;  // substrings the message must contain (the op name first)
};

struct Tolerance {
  double atol;
  double rtol;
};

// How much further a CUDA output may stray from the CPU output than the CPU rule allows (the row's
// `tolerance` for the sample dtype, else default_tolerance): for an output of a listed dtype, atol
// and rtol are each raised to at least the listed floor, never lowered. `why` is mandatory whenever
// a floor is listed (tests/op_table/test_row_specs.cpp checks it, and the caps).
struct CudaTolerance {
  std::map<DType, Tolerance> at_least;  // output dtype -> floor
  std::string why;
};

// Shared reasons for the common float32 floor (atol 1e-5, rtol 1e-4); rows cite them by name.
extern const char* const kCudaWhySumOrder;
extern const char* const kCudaWhyLibm;
extern const char* const kCudaWhySumOrderAndLibm;
// The common floor: float32 outputs held to atol 1e-5, rtol 1e-4 on CUDA, for `why`.
CudaTolerance cuda_float32_floor(const char* why);

// One input of a bench case, made on the GPU before timing: drawn from a normal distribution in
// float32 and cast (never zeros), filled with ones (a norm's weight), or left uninitialized (an
// output buffer). Only drawn inputs count towards a rotation set's size.
struct BenchInput {
  enum class Fill { Normal, Ones, Empty };
  Shape shape;
  DType dtype;
  Fill fill = Fill::Normal;
  MemoryFormat format = MemoryFormat::Contiguous;
};

// A bench case at one dtype and one size (--elements): what gpu_bench times and
// tools/torch_peer.py times the same way in PyTorch.
struct BenchSetup {
  Shape shape;  // the shape the results report (matmul: [m, k, n]; bench/RESULTS.md joins on it)
  std::vector<BenchInput> inputs;
  double bytes = 0;       // the fewest bytes the work moves: each input read once, each output written once
  double flops = 0;       // compute-bound cases: floating-point operations (a multiply-add counts 2); 0 otherwise
  std::string precision;  // compute-bound cases: "bf16" or "tf32", whose 8192^3 matmul is their ceiling
  bool tf32 = false;      // the math switches: TF32 for matmul and cuDNN on (compute-bound cases)
  bool ceiling = false;   // this case is its precision's ceiling
};

// A benchmark of the row's op. The case list (bench/case_list.h) has one case per dtype.
struct BenchCase {
  std::string name;           // the results' "case" (stable: bench/RESULTS.md and bench_compare.py join on it)
  std::vector<DType> dtypes;  // float32 and bfloat16 where the row supports them
  std::string op;             // the op tools/torch_peer.py maps to a torch call
  std::string args = "{}";    // that call's arguments besides the inputs, a JSON object
  std::function<BenchSetup(DType dtype, int64_t elements)> setup;
  // The timed call on the inputs of setup(); empty: the row's own op.
  std::function<TensorList(const TensorList&)> run;
};

struct OpRow {
  std::string name;
  // The op family the row tests: the stem of its files on every floor (core/ops/<family>.cpp,
  // tests/op_table/<family>_rows.cpp, ...; docs/ops.md lists them). Set by the registry from the
  // rows file that adds the row.
  std::string family;
  std::vector<DType> dtypes;  // forward checked in each against the float64 reference
  std::vector<Sample> samples;
  // The op under test; returns its outputs (compared one by one).
  std::function<TensorList(const TensorList&)> op;
  // Independent float64 reference from plain loops over the values (never kiln's kernels).
  std::function<TensorList(const TensorList&)> reference;
  std::vector<size_t> differentiable;  // inputs gradchecked (float64) with respect to
  std::vector<ErrorCase> errors;
  std::map<DType, Tolerance> tolerance;  // overrides of default_tolerance; each carries a why-comment
  bool random = false;                   // draws from the generator: the runner reseeds before each call
  // Outputs that are compared exactly (indices, bools) regardless of dtype.
  std::vector<size_t> exact_outputs;
  // Expected dtype of output 0 for a given sample dtype (type promotion); unchecked when empty.
  std::function<DType(DType)> out_dtype;
  // CUDA parity: how much looser than the CPU rule a CUDA output may be, with the reason.
  CudaTolerance cuda_tolerance;
  // GPU benchmarks of this op (bench/gpu_bench.cpp); most rows have none.
  std::vector<BenchCase> bench;
};

Tolerance default_tolerance(DType t);

// The tolerances the CUDA parity runner (tests/cuda/run_parity.cpp) holds a CUDA result to against
// the CPU result: forward outputs of dtype `out_dtype` for a sample of `sample_dtype`, and gradients
// of dtype `grad_dtype`. They read only the row's fields.
Tolerance cuda_forward_tolerance(const OpRow& row, DType sample_dtype, DType out_dtype);
Tolerance cuda_gradient_tolerance(const OpRow& row, DType sample_dtype, DType grad_dtype);

// The whole table, built on first use from the op_table/*_rows.cpp files (no static-init order).
const std::vector<OpRow>& op_table();

// One entry per rows file, tests/op_table/<family>_rows.cpp, whose add function appends its rows.
struct RowFamily {
  const char* family;
  void (*add)(std::vector<OpRow>&);
};
const std::vector<RowFamily>& row_families();
void add_elementwise_rows(std::vector<OpRow>& rows);
void add_reduce_rows(std::vector<OpRow>& rows);
void add_shape_rows(std::vector<OpRow>& rows);
void add_factory_rows(std::vector<OpRow>& rows);
void add_linalg_rows(std::vector<OpRow>& rows);
void add_conv_rows(std::vector<OpRow>& rows);
void add_nn_rows(std::vector<OpRow>& rows);
void add_attention_rows(std::vector<OpRow>& rows);

// --- helpers for writing rows ------------------------------------------------------------------

inline const std::vector<DType> kFloatTypes{DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};
inline const std::vector<DType> kAllNumeric{DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                            DType::Int32,   DType::Int64,   DType::UInt8};

// Deterministic random inputs: a fixed seed per call site keeps the table reproducible.
// Floats: normal values (scaled); integers: uniform in [-5, 5] (uint8: [0, 9]); bool: fair coin.
Tensor rnd(const Shape& shape, DType dtype, Device device, uint64_t seed, double scale = 1.0);
// Floats in [lo, hi] (for log, sqrt, pow bases, ...).
Tensor rnd_range(const Shape& shape, DType dtype, Device device, uint64_t seed, double lo, double hi);
// Distinct values (a shuffled arange, scaled), so max/min/topk have no ties to disambiguate.
Tensor rnd_distinct(const Shape& shape, DType dtype, Device device, uint64_t seed);
// A non-contiguous tensor with the same values as t (every other element along the last dim of a
// wider buffer).
Tensor noncontig(const Tensor& t);

// Float64 values of t in row-major order, and building a float64 CPU tensor from values.
std::vector<double> values(const Tensor& t);
Tensor from_values(const std::vector<double>& v, const Shape& shape, DType dtype = DType::Float64);

// Reference helpers over broadcast shapes, independent of kiln's kernels.
Tensor ref_map(const TensorList& inputs, const std::function<double(const std::vector<double>&)>& fn,
               DType out_dtype = DType::Float64);
// Reduces dims (empty = all) of x with fn over the reduced values in row-major order.
Tensor ref_reduce(const Tensor& x, const Shape& dims, bool keepdim,
                  const std::function<double(const std::vector<double>&)>& fn, DType out_dtype = DType::Float64);
// Row-major multi-index helpers.
Shape unravel(int64_t linear, const Shape& shape);
int64_t ravel(const Shape& index, const Shape& shape);

// Runs `call` and checks it throws kiln::Error mentioning every string; returns "" when it does,
// else what went wrong.
std::string expect_error(const ErrorCase& e);

}  // namespace kiln::test
