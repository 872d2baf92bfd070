// The op test table (docs/architecture.md section 6): one row per op with sample inputs, dtypes,
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
// float32 and cast (never zeros), filled with ones (a norm's weight), left uninitialized (an
// output buffer), or token ids (int64, uniform in [0, upper): a language model's batch over a
// vocabulary of `upper`). Only normal draws count towards a rotation set's size.
struct BenchInput {
  enum class Fill { Normal, Ones, Empty, Tokens };
  Shape shape;
  DType dtype;
  Fill fill = Fill::Normal;
  MemoryFormat format = MemoryFormat::Contiguous;
  int64_t upper = 0;  // Tokens: the ids' exclusive bound
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
void add_copy_rows(std::vector<OpRow>& rows);
void add_math_rows(std::vector<OpRow>& rows);
void add_reduce_rows(std::vector<OpRow>& rows);
void add_topk_rows(std::vector<OpRow>& rows);
void add_shape_rows(std::vector<OpRow>& rows);
void add_index_rows(std::vector<OpRow>& rows);
void add_search_rows(std::vector<OpRow>& rows);
void add_triangle_rows(std::vector<OpRow>& rows);
void add_view_rows(std::vector<OpRow>& rows);
void add_random_rows(std::vector<OpRow>& rows);
void add_factory_rows(std::vector<OpRow>& rows);
void add_fold_rows(std::vector<OpRow>& rows);
void add_matmul_rows(std::vector<OpRow>& rows);
void add_conv_rows(std::vector<OpRow>& rows);
void add_pool_rows(std::vector<OpRow>& rows);
void add_softmax_rows(std::vector<OpRow>& rows);
void add_activation_rows(std::vector<OpRow>& rows);
void add_layer_norm_rows(std::vector<OpRow>& rows);
void add_loss_rows(std::vector<OpRow>& rows);
void add_margin_loss_rows(std::vector<OpRow>& rows);
void add_norm_rows(std::vector<OpRow>& rows);
void add_special_rows(std::vector<OpRow>& rows);
void add_polynomial_rows(std::vector<OpRow>& rows);
void add_interpolate_rows(std::vector<OpRow>& rows);
void add_batch_norm_rows(std::vector<OpRow>& rows);
void add_cross_entropy_rows(std::vector<OpRow>& rows);
void add_ctc_loss_rows(std::vector<OpRow>& rows);
void add_scatter_reduce_rows(std::vector<OpRow>& rows);
void add_grid_sample_rows(std::vector<OpRow>& rows);
void add_volume_rows(std::vector<OpRow>& rows);
void add_other_rows(std::vector<OpRow>& rows);
void add_join_rows(std::vector<OpRow>& rows);
void add_scatter_into_rows(std::vector<OpRow>& rows);
void add_blas_rows(std::vector<OpRow>& rows);
void add_linalg_rows(std::vector<OpRow>& rows);
void add_spectral_rows(std::vector<OpRow>& rows);
void add_fft_rows(std::vector<OpRow>& rows);
void add_pointwise_rows(std::vector<OpRow>& rows);
void add_mse_loss_rows(std::vector<OpRow>& rows);
void add_embedding_rows(std::vector<OpRow>& rows);
void add_dropout_rows(std::vector<OpRow>& rows);
void add_attention_rows(std::vector<OpRow>& rows);
void add_foreach_rows(std::vector<OpRow>& rows);
void add_scan_rows(std::vector<OpRow>& rows);
void add_einsum_rows(std::vector<OpRow>& rows);
void add_distance_rows(std::vector<OpRow>& rows);

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

// GELU's tanh approximation in float64 (the gelu_tanh and linear_gelu rows).
double gelu_tanh_ref(double x);

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

// --- helpers that several rows files share -----------------------------------------------------
// A helper that one family needs stays in that family's rows file.

using Values = std::vector<double>;
// An input generator: a tensor of a shape, dtype and device from a seed.
using Gen = std::function<Tensor(const Shape&, DType, Device, uint64_t)>;
using ListFn = std::function<TensorList(const TensorList&)>;
using RefFn = std::function<double(const Values&)>;

size_t at(int64_t i);                     // a vector position from an int64 index
// int64 class indices of `shape` in [0, classes) from a small LCG (independent of kiln's
// generator); every `ignore_every`-th one (1-based; 0 = none) is `ignore`. On device d.
Tensor class_targets(const Shape& shape, int64_t classes, uint64_t seed, int64_t ignore_every, int64_t ignore,
                     Device d);
int64_t wrap(int64_t dim, int64_t ndim);  // a negative dim counted from the end
DType same_dtype(DType t);                // out_dtype of ops that keep the input's dtype
// A function, not a namespace-scope vector: the table is built during static initialization of
// another translation unit (run_op_table.cpp), possibly before the globals of the one defining it.
std::vector<DType> numeric_and_bool();

// Losses (loss_rows.cpp, margin_loss_rows.cpp): per-element (or per-sample) losses of `shape`
// reduced as `red` says, and the reduction's name for row names.
Tensor reduce_ref(const Values& losses, const Shape& shape, Reduction red);
const char* red_name(Reduction red);

// Elementwise ops and casts (elementwise_rows.cpp, copy_rows.cpp).
// rnd's values, scaled.
Gen normal(double scale = 1.0);
// Normal values (scaled) moved at least `margin` away from every point in `kinks` (an op's kinks
// or jumps, so central differences never straddle one); integer dtypes keep rnd's integers.
Gen avoiding(Values kinks, double margin = 0.05, double scale = 1.0);
// Values away from zero (denominators, negative powers): |x| >= 0.25 for floats, nonzero integers.
Gen nonzero();
// Positive values: uniform in [lo, hi] for floats, integers in [1, 10] otherwise.
Gen positive(double lo, double hi);
// One input: odd size, non-contiguous, transposed, 0-d and empty.
std::vector<Sample> unary_samples(uint64_t seed, Gen g);
// Two inputs from ga and gb: same shape, broadcast, non-contiguous, 0-d beside a tensor, both 0-d.
std::vector<Sample> binary_samples(uint64_t seed, Gen ga, Gen gb);
// Samples of an in-place op self.op_(other): other broadcasts to self's shape.
std::vector<Sample> inplace_samples(uint64_t seed, Gen ga, Gen gb);
// The tensor an in-place row modifies: a copy of x, strided like x when x is strided (when x is
// gradchecked, a view of a buffer that takes part in autograd: the op goes into its history).
Tensor inplace_target(const Tensor& x);
// A reference elementwise over all inputs (broadcast), and one with an output per function.
ListFn ref(RefFn fn);
ListFn refs(std::vector<RefFn> fns);
OpRow make_row(std::string name, std::vector<DType> dtypes, std::vector<Sample> samples, ListFn op, ListFn reference,
               std::vector<size_t> differentiable, std::function<DType(DType)> out_dtype);
ErrorCase undefined_input(const std::string& op, std::function<Tensor(const Tensor&)> fn);

// Rows over distinct values (reduce_rows.cpp, topk_rows.cpp): rnd_distinct of 3x5x7, a
// non-contiguous 5x3x9 and a permuted 7x3x5 (at most 135 elements, so they stay exact in bfloat16
// and uint8).
std::vector<Sample> distinct_samples(uint64_t seed);
// The same shapes, contiguous, with every fourth element (row-major, from the second) NaN in float
// dtypes: the inputs of the reductions that leave NaNs out.
std::vector<Sample> nan_samples(uint64_t seed);

// Ops that move values (shape, index, triangle and view rows). References move them with plain
// index arithmetic (unravel/ravel).
// Output of `out_shape` whose element at each index is x's element at the multi-index src(index).
Tensor ref_pick(const Tensor& x, const Shape& out_shape, const std::function<Shape(const Shape&)>& src);
// The three usual samples of a one-input op: contiguous, non-contiguous and transposed (3-d, odd sizes).
std::vector<Sample> one_input_samples(uint64_t seed);
// A one-input, one-output row in every numeric dtype, differentiable, keeping the dtype: op and
// reference both get the input.
OpRow unary_row(const std::string& name, std::vector<Sample> samples, std::function<Tensor(const Tensor&)> op,
                std::function<Tensor(const Tensor&)> ref);

// Factory and random rows (factory_rows.cpp, random_rows.cpp): the sample's only tensor is an
// int64 scalar holding the dtype to create (an integer, so the runner never converts it).
Tensor carrier(DType t, Device d);
DType dt(const TensorList& x);  // the dtype a carrier holds
Sample shape_sample(const std::string& name);

// conv2d and pooling rows (conv_rows.cpp, pool_rows.cpp): an op's hyper-parameters travel with each
// sample as a trailing int64 tensor (the runner never converts integer inputs), so one row covers
// many configurations.
Tensor params(const std::vector<int64_t>& v, Device d);
std::vector<int64_t> param_values(const Tensor& t);
Tensor channels_last(const Tensor& t);
// The maximum of each plane of x (its last out.size() dims) over windows: window(plane, d, o)
// is the range [lo, hi) along spatial dim d of output cell o. Returns the values and, int64, the
// flat index of each winner in its plane: the first strict maximum in the window's row-major order
// (pool_rows.cpp's adaptive and fractional rows, volume_rows.cpp's).
using WindowFn = std::function<std::pair<int64_t, int64_t>(int64_t plane, size_t d, int64_t o)>;
TensorList ref_window_max(const Tensor& x, const Shape& out, const WindowFn& window);
// ref_window_max over PyTorch's adaptive windows [floor(o n / out), ceil((o + 1) n / out)).
TensorList ref_adaptive_max(const Tensor& x, const Shape& out);
// PyTorch's fractional max-pool window starts along a dim of size n, for sample u: computed in
// float32 unless f64, as the op computes them for non-float64 and float64 inputs.
std::vector<int64_t> ref_fractional_starts(double u, int64_t n, int64_t out, int64_t k, bool f64);

// The memory-bound bench of a row-wise op of a transformer (softmax_rows.cpp, layer_norm_rows.cpp)
// on [n/1024, 1024] (n: --elements) in float32 and bfloat16: each element read once and written
// once. With `weight`, layer_norm over the rows with a float32 weight of ones and no bias, plus
// 2 x 4 x 1024 bytes of parameters (the formula of the runs in bench/RESULTS.md); its own timed
// call, since the row's op normalizes a fixed shape.
BenchCase row_bench(const std::string& name, const std::string& op, const std::string& args, bool weight);

}  // namespace kiln::test
