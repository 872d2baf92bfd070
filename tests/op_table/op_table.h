// The op test table (ARCHITECTURE.md section 5): one row per op with sample inputs, dtypes,
// differentiable inputs, tolerances, an independent float64 reference and error cases. The CPU
// runner checks forward against the reference in every dtype, gradchecks every differentiable
// input and expects every error case to be a kiln::Error naming the op; the CUDA parity runner
// reuses the same rows with the device switched.
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

struct OpRow {
  std::string name;
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
};

Tolerance default_tolerance(DType t);

// The whole table, built on first use from the op_table/*_rows.cpp files (no static-init order).
const std::vector<OpRow>& op_table();
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
