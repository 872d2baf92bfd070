// The bad-input sweep of the core layer: every public header of core/ gets rows of calls
// that must fail with a specific kiln error naming the op and the offending values: dims (0-d
// tensors included), indices, sizes whose element or byte counts overflow int64, view extents,
// dtypes, devices, undefined tensors and hyperparameters. The runner is tests/core/bad_input.h;
// nn's rows are in tests/nn/test_bad_input_nn.cpp.
#include "tests/core/bad_input.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "core/autograd.h"
#include "core/kiln.h"
#include "core/ops/foreach.h"
#include "core/random.h"
#include "tests/fake_cuda.h"

using namespace kiln;
using kiln::bad_input::Expect;
using kiln::bad_input::Table;
using kiln::test::fake_cuda;
using kiln::bad_input::f32, kiln::bad_input::i64, kiln::bad_input::kInf, kiln::bad_input::kNaN, kiln::bad_input::kP62;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
// 274177 * 67280421310721 = 2^64 + 1: a shape whose element count wraps around to exactly 1, so a
// wrapped count passes every "does it match" comparison with a one-element tensor.
constexpr int64_t kWrapA = 274177;
constexpr int64_t kWrapB = 67280421310721;
// Counts that fit int64 but no memory: 2^50 float32 elements are 4 PiB.
constexpr int64_t kP50 = int64_t{1} << 50;

Tensor f64(const Shape& s) { return zeros(s, DType::Float64); }
Tensor leaf(const Shape& s) { return zeros(s).set_requires_grad(true); }
Tensor scalar0() { return scalar_tensor(1.0); }
// A view of n elements without n elements of memory: one element broadcast.
Tensor broadcast_of(const Shape& s) { return zeros(Shape(s.size(), 1)).expand(s); }
Tensor f32_scalar(float v) { return full({}, v, DType::Float32); }


// --- core/tensor.h: metadata, undefined tensors, shape helpers ------------------------------------

void tensor_rows(Table& t) {
  t.add("size(0) of a 0-d tensor", Expect::Index, {"size", "0-d"}, [] { (void)scalar0().size(0); });
  t.add("size(-1) of a 0-d tensor", Expect::Index, {"size", "-1", "0-d"}, [] { (void)scalar0().size(-1); });
  t.add("stride(0) of a 0-d tensor", Expect::Index, {"stride", "0-d"}, [] { (void)scalar0().stride(0); });
  t.add("stride(-1) of a 0-d tensor", Expect::Index, {"stride", "-1"}, [] { (void)scalar0().stride(-1); });
  t.add("size(2) of a 2-d tensor", Expect::Index, {"size", "2", "2-d"}, [] { (void)f32({2, 3}).size(2); });
  t.add("size(-3) of a 2-d tensor", Expect::Index, {"size", "-3"}, [] { (void)f32({2, 3}).size(-3); });
  t.add("stride(1) of a 1-d tensor", Expect::Index, {"stride", "1"}, [] { (void)f32({4}).stride(1); });
  t.add("size(INT64_MIN)", Expect::Index, {"size", "-9223372036854775808"}, [] { (void)f32({4}).size(kMin); });
  t.add("stride(INT64_MAX)", Expect::Index, {"stride", "9223372036854775807"}, [] { (void)f32({4}).stride(kMax); });

  t.add("undefined: dtype", Expect::Error, {"dtype", "undefined"}, [] { (void)Tensor().dtype(); });
  t.add("undefined: device", Expect::Error, {"device", "undefined"}, [] { (void)Tensor().device(); });
  t.add("undefined: sizes", Expect::Error, {"sizes", "undefined"}, [] { (void)Tensor().sizes(); });
  t.add("undefined: strides", Expect::Error, {"strides", "undefined"}, [] { (void)Tensor().strides(); });
  t.add("undefined: numel", Expect::Error, {"numel", "undefined"}, [] { (void)Tensor().numel(); });
  t.add("undefined: dim", Expect::Error, {"dim", "undefined"}, [] { (void)Tensor().dim(); });
  t.add("undefined: size(0)", Expect::Error, {"size", "undefined"}, [] { (void)Tensor().size(0); });
  t.add("undefined: stride(0)", Expect::Error, {"stride", "undefined"}, [] { (void)Tensor().stride(0); });
  t.add("undefined: storage_offset", Expect::Error, {"storage_offset", "undefined"},
        [] { (void)Tensor().storage_offset(); });
  t.add("undefined: is_contiguous", Expect::Error, {"is_contiguous", "undefined"},
        [] { (void)Tensor().is_contiguous(); });
  t.add("undefined: is_non_overlapping_and_dense", Expect::Error, {"is_non_overlapping_and_dense", "undefined"},
        [] { (void)Tensor().is_non_overlapping_and_dense(); });
  t.add("undefined: data_ptr", Expect::Error, {"data_ptr", "undefined"}, [] { (void)Tensor().data_ptr(); });
  t.add("undefined: data_ptr<float>", Expect::Error, {"data_ptr", "undefined"},
        [] { (void)Tensor().data_ptr<float>(); });
  t.add("undefined: item", Expect::Error, {"item", "undefined"}, [] { (void)Tensor().item(); });
  t.add("undefined: clone", Expect::Error, {"clone", "undefined"}, [] { (void)Tensor().clone(); });
  t.add("undefined: contiguous", Expect::Error, {"contiguous", "undefined"}, [] { (void)Tensor().contiguous(); });
  t.add("undefined: to(dtype)", Expect::Error, {"to", "undefined"}, [] { (void)Tensor().to(DType::Float64); });
  t.add("undefined: to(device)", Expect::Error, {"to", "undefined"}, [] { (void)Tensor().to(Device::cpu()); });
  t.add("undefined: to_vector", Expect::Error, {"to_vector", "undefined"}, [] { (void)Tensor().to_vector<float>(); });
  t.add("undefined: view", Expect::Error, {"view", "undefined"}, [] { (void)Tensor().view({1}); });
  t.add("undefined: reshape", Expect::Error, {"reshape", "undefined"}, [] { (void)Tensor().reshape({1}); });
  t.add("undefined: t", Expect::Error, {"t:", "undefined"}, [] { (void)Tensor().t(); });
  t.add("undefined: transpose", Expect::Error, {"transpose", "undefined"}, [] { (void)Tensor().transpose(0, 1); });
  t.add("undefined: narrow", Expect::Error, {"narrow", "undefined"}, [] { (void)Tensor().narrow(0, 0, 1); });
  t.add("undefined: expand_as", Expect::Error, {"expand", "undefined"}, [] { (void)f32({2}).expand_as(Tensor()); });
  t.add("undefined: sum method", Expect::Error, {"sum", "undefined"}, [] { (void)Tensor().sum(); });
  t.add("undefined: exp method", Expect::Error, {"exp", "undefined"}, [] { (void)Tensor().exp(); });
  t.add("undefined: add_ self", Expect::Error, {"add_", "undefined"}, [] {
    Tensor u;
    u.add_(f32({1}));
  });
  t.add("undefined: add_ operand", Expect::Error, {"add_", "undefined"}, [] { f32({1}).add_(Tensor()); });
  t.add("undefined: fill_", Expect::Error, {"fill_", "undefined"}, [] {
    Tensor u;
    u.fill_(1);
  });
  t.add("undefined: copy_ source", Expect::Error, {"copy_", "undefined"}, [] { f32({1}).copy_(Tensor()); });

  t.add("data_ptr<double> of a float32 tensor", Expect::DType, {"data_ptr", "float32", "float64"},
        [] { (void)f32({2}).data_ptr<double>(); });
  t.add("data_ptr<int64_t> of a bool tensor", Expect::DType, {"data_ptr", "bool", "int64"},
        [] { (void)zeros({2}, DType::Bool).data_ptr<int64_t>(); });
  t.add("item of two elements", Expect::Shape, {"item", "[2]"}, [] { (void)f32({2}).item(); });
  t.add("item of no elements", Expect::Shape, {"item", "[0]"}, [] { (void)f32({0}).item(); });
  t.add("item<float> of a [2, 2] tensor", Expect::Shape, {"item", "[2, 2]"}, [] { (void)f32({2, 2}).item<float>(); });

  t.add("shape_numel wraps to 1", Expect::Shape, {"numel", "274177"}, [] { (void)shape_numel({kWrapA, kWrapB}); });
  t.add("shape_numel of 2^32 x 2^32", Expect::Shape, {"numel", "4294967296"}, [] {
    (void)shape_numel({int64_t{1} << 32, int64_t{1} << 32});
  });
  t.add("shape_numel of a negative size", Expect::Shape, {"numel", "-3"}, [] { (void)shape_numel({2, -3}); });
  t.add("contiguous_strides overflow", Expect::Shape, {"contiguous_strides"}, [] {
    (void)contiguous_strides({int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40});
  });
  t.add("channels_last_strides of a 2-d shape", Expect::Shape, {"channels_last", "[2, 3]"}, [] {
    (void)channels_last_strides({2, 3});
  });
  t.add("channels_last_strides overflow", Expect::Shape, {"channels_last"}, [] {
    (void)channels_last_strides({int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40, 1});
  });
  t.add("wrap_dim past the end", Expect::Index, {"myop", "dimension 2"}, [] { (void)wrap_dim(2, 2, "myop"); });
  t.add("wrap_dim of a 0-d tensor", Expect::Index, {"myop", "0-d"}, [] { (void)wrap_dim(0, 0, "myop"); });
  t.add("wrap_insert_dim past the end", Expect::Index, {"myop", "3"}, [] { (void)wrap_insert_dim(3, 1, "myop"); });
  t.add("wrap_insert_dim before the start", Expect::Index, {"myop", "-3"},
        [] { (void)wrap_insert_dim(-3, 1, "myop"); });
}

// --- core/ops/factory.h and core/ops/random.h --------------------------------------------------------

void factory_rows(Table& t) {
  t.add("zeros of a negative size", Expect::Shape, {"zeros", "[-1]"}, [] { (void)zeros({-1}); });
  t.add("ones of a negative size", Expect::Shape, {"ones", "[2, -3]"}, [] { (void)ones({2, -3}); });
  t.add("full of a negative size", Expect::Shape, {"full", "[-5]"}, [] { (void)full({-5}, 1.0); });
  t.add("empty of a negative size", Expect::Shape, {"empty", "[-1]"}, [] { (void)empty({-1}); });
  t.add("empty_strided of a negative size", Expect::Shape, {"empty_strided", "[-2]"},
        [] { (void)empty_strided({-2}, {1}); });
  t.add("empty_strided of mismatched lengths", Expect::Shape, {"empty_strided", "[2, 2]", "[1]"}, [] {
    (void)empty_strided({2, 2}, {1});
  });
  t.add("empty_strided of a negative stride", Expect::Shape, {"empty_strided", "[-1]"},
        [] { (void)empty_strided({3}, {-1}); });
  t.add("empty_strided whose extent overflows", Expect::Shape, {"empty_strided", "1099511627776"}, [] {
    (void)empty_strided({int64_t{1} << 40, int64_t{1} << 40}, {int64_t{1} << 40, 1});
  });
  t.add("zeros whose byte count wraps to 4", Expect::Shape, {"zeros", "4611686018427387905"},
        [] { (void)zeros({kP62 + 1}); });
  t.add("zeros of 2^62 float32 (2^64 bytes)", Expect::Shape, {"zeros", "4611686018427387904"},
        [] { (void)zeros({kP62}); });
  t.add("zeros whose element count wraps to 1", Expect::Shape, {"zeros", "274177"}, [] {
    (void)zeros({kWrapA, kWrapB});
  });
  t.add("ones whose element count wraps to 0", Expect::Shape, {"ones", "[4294967296, 4294967296]"}, [] {
    (void)ones({int64_t{1} << 32, int64_t{1} << 32});
  });
  t.add("full of INT64_MAX elements", Expect::Shape, {"full", "9223372036854775807"}, [] { (void)full({kMax}, 2.0); });
  t.add("empty of INT64_MAX int64", Expect::Shape, {"empty", "9223372036854775807"},
        [] { (void)empty({kMax}, DType::Int64); });
  t.add("zeros of 4 PiB", Expect::OutOfMemory, {"zeros", "1125899906842624"}, [] { (void)zeros({kP50}); });
  t.add("empty of 8 PiB float64", Expect::OutOfMemory, {"empty", "1125899906842624"},
        [] { (void)empty({kP50}, DType::Float64); });
  t.add("empty channels-last of a 3-d shape", Expect::Shape, {"empty", "[2, 3, 4]"}, [] {
    (void)empty({2, 3, 4}, {}, MemoryFormat::ChannelsLast);
  });
  t.add("empty_like of undefined", Expect::Error, {"empty_like", "undefined"}, [] { (void)empty_like(Tensor()); });
  t.add("zeros_like of undefined", Expect::Error, {"zeros_like", "undefined"}, [] { (void)zeros_like(Tensor()); });
  t.add("ones_like of undefined", Expect::Error, {"ones_like", "undefined"}, [] { (void)ones_like(Tensor()); });
  t.add("full_like of undefined", Expect::Error, {"full_like", "undefined"}, [] { (void)full_like(Tensor(), 2); });
  t.add("zeros of int64 that requires grad", Expect::DType, {"requires_grad", "int64"},
        [] { (void)zeros({2}, TensorOptions(DType::Int64, Device::cpu(), true)); });

  t.add("arange with step 0", Expect::Error, {"arange", "step=0"}, [] { (void)arange(0, 10, 0); });
  t.add("arange stepping away from end", Expect::Error, {"arange", "points away"}, [] { (void)arange(0, 10, -1); });
  t.add("arange to infinity", Expect::Error, {"arange", "finite"}, [] { (void)arange(0.0, kInf); });
  t.add("arange to NaN", Expect::Error, {"arange", "finite"}, [] { (void)arange(0.0, kNaN); });
  t.add("arange of 1e30 elements", Expect::Shape, {"arange", "1e+30"}, [] { (void)arange(0.0, 1e30, 1.0); });
  t.add("arange of 2^50 int64 elements", Expect::OutOfMemory, {"arange", "1125899906842624"},
        [] { (void)arange(int64_t{0}, kP50); });
  t.add("linspace with negative steps", Expect::Error, {"linspace", "-1"}, [] { (void)linspace(0, 1, -1); });
  t.add("linspace of 2^62 steps", Expect::Shape, {"linspace", "4611686018427387904"},
        [] { (void)linspace(0, 1, kP62); });
  t.add("full of float32 with 1e39", Expect::Error, {"full", "1e+39", "float32"}, [] { (void)full({2}, 1e39); });
  t.add("linspace to an end past uint8", Expect::Error, {"linspace", "300", "uint8"},
        [] { (void)linspace(0, 300, 4, TensorOptions(DType::UInt8)); });
  t.add("arange in bool", Expect::DType, {"arange", "bool"}, [] { (void)arange(0, 2, 1, TensorOptions(DType::Bool)); });
  t.add("linspace in bool", Expect::DType, {"linspace", "bool"},
        [] { (void)linspace(0, 1, 4, TensorOptions(DType::Bool)); });
  t.add("from_blob of a null pointer", Expect::Error, {"from_blob", "null"},
        [] { (void)from_blob(nullptr, {3}, DType::Float32); });
  t.add("from_blob of a negative size", Expect::Shape, {"from_blob", "[-1]"}, [] {
    float v = 0;
    (void)from_blob(&v, {-1}, DType::Float32);
  });
  t.add("from_blob whose byte count overflows", Expect::Shape, {"from_blob", "4611686018427387904"}, [] {
    float v = 0;
    (void)from_blob(&v, {kP62}, DType::Float32);
  });
  t.add("from_blob whose element count wraps to 1", Expect::Shape, {"from_blob", "274177"}, [] {
    float v = 0;
    (void)from_blob(&v, {kWrapA, kWrapB}, DType::Float32);
  });
  t.add("tensor: too few values", Expect::Shape, {"tensor", "3 values", "[2, 2]"}, [] {
    (void)tensor({1.0f, 2.0f, 3.0f}, {2, 2});
  });
  t.add("tensor: negative shape with matching count", Expect::Shape, {"tensor", "[-1, -2]"}, [] {
    (void)tensor({1.0f, 2.0f}, {-1, -2});
  });
  t.add("tensor: shape whose count wraps to 1", Expect::Shape, {"tensor", "274177"}, [] {
    (void)tensor({1.0f}, {kWrapA, kWrapB});
  });

  t.add("rand of a negative size", Expect::Shape, {"rand", "[-1]"}, [] { (void)rand({-1}); });
  t.add("rand of an integer dtype", Expect::DType, {"rand", "int64"}, [] { (void)rand({2}, DType::Int64); });
  t.add("randn of an integer dtype", Expect::DType, {"randn", "int32"}, [] { (void)randn({2}, DType::Int32); });
  t.add("randn whose byte count overflows", Expect::Shape, {"randn", "4611686018427387904"},
        [] { (void)randn({kP62}); });
  t.add("rand with a cuda generator", Expect::Device, {"rand", "cuda:0", "cpu"},
        [] { (void)rand({2}, {}, Generator(1, Device::cuda(0))); });
  t.add("randint with low == high", Expect::Error, {"randint", "low=5", "high=5"}, [] { (void)randint(5, 5, {2}); });
  t.add("randint of a negative size", Expect::Shape, {"randint", "[-2]"}, [] { (void)randint(0, 10, {-2}); });
  t.add("randint past bool's range", Expect::Error, {"randint", "bool", "10"},
        [] { (void)randint(0, 10, {2}, DType::Bool); });
  t.add("randint past uint8's range", Expect::Error, {"randint", "uint8", "1000"},
        [] { (void)randint(0, 1000, {2}, DType::UInt8); });
  t.add("randint with a cuda generator", Expect::Device, {"randint", "cuda:0"},
        [] { (void)randint(0, 3, {2}, DType::Int64, Generator(1, Device::cuda(0))); });
  t.add("uniform_ with low > high", Expect::Error, {"uniform_", "low"}, [] { f32({2}).uniform_(1.0, 0.0); });
  t.add("uniform_ with NaN low", Expect::Error, {"uniform_", "nan"}, [] { f32({2}).uniform_(kNaN, 1.0); });
  t.add("uniform_ with infinite high", Expect::Error, {"uniform_", "inf"}, [] { f32({2}).uniform_(0.0, kInf); });
  t.add("uniform_ of an int tensor", Expect::DType, {"uniform_", "int64"}, [] { i64({2}).uniform_(); });
  t.add("uniform_ of a leaf that requires grad", Expect::Autograd, {"uniform_", "leaf"}, [] { leaf({2}).uniform_(); });
  t.add("normal_ with negative std", Expect::Error, {"normal_", "std"}, [] { f32({2}).normal_(0.0, -1.0); });
  t.add("normal_ with infinite std", Expect::Error, {"normal_", "std", "inf"}, [] { f32({2}).normal_(0.0, kInf); });
  t.add("normal_ with NaN mean", Expect::Error, {"normal_", "mean", "nan"}, [] { f32({2}).normal_(kNaN, 1.0); });
  t.add("normal_ of a bool tensor", Expect::DType, {"normal_", "bool"}, [] { zeros({2}, DType::Bool).normal_(); });
  t.add("normal_ with a cuda generator", Expect::Device, {"normal_", "cuda:0"},
        [] { f32({2}).normal_(0.0, 1.0, Generator(1, Device::cuda(0))); });
  t.add("multinomial of a 0-d tensor", Expect::Shape, {"multinomial", "[]"}, [] { (void)multinomial(scalar0(), 1); });
  t.add("multinomial of a 3-d tensor", Expect::Shape, {"multinomial", "[2, 2, 2]"}, [] {
    (void)multinomial(ones({2, 2, 2}), 1);
  });
  t.add("multinomial of int weights", Expect::DType, {"multinomial", "int64"}, [] { (void)multinomial(i64({3}), 1); });
  t.add("multinomial of no samples", Expect::Error, {"multinomial", "num_samples", "0"},
        [] { (void)multinomial(ones({3}), 0); });
  t.add("multinomial: more samples than categories", Expect::Error, {"multinomial", "4", "3 categories"},
        [] { (void)multinomial(ones({3}), 4); });
  t.add("multinomial of no categories", Expect::Shape, {"multinomial", "[2, 0]"}, [] {
    (void)multinomial(ones({2, 0}), 1);
  });
  t.add("multinomial of a negative weight", Expect::Error, {"multinomial", "row 0"}, [] {
    (void)multinomial(tensor({-1.0f, 2.0f}), 1);
  });
  t.add("multinomial of an all-zero row", Expect::Error, {"multinomial", "row 0"},
        [] { (void)multinomial(zeros({3}), 1); });
  t.add("multinomial of 2^62 samples", Expect::Shape, {"multinomial", "4611686018427387904"}, [] {
    (void)multinomial(ones({2, 3}), kP62, true);
  });
  t.add("multinomial with a cuda generator", Expect::Device, {"multinomial", "cuda:0"},
        [] { (void)multinomial(ones({3}), 1, false, Generator(1, Device::cuda(0))); });
  t.add("multinomial of undefined", Expect::Error, {"multinomial", "undefined"},
        [] { (void)multinomial(Tensor(), 1); });
}

// --- core/random.h -------------------------------------------------------------------------------------

void generator_rows(Table& t) {
  t.add("default_generator of cuda:20", Expect::Device, {"default_generator", "cuda:20"},
        [] { (void)default_generator(Device::cuda(20)); });
  t.add("default_generator of cuda:-1", Expect::Device, {"default_generator", "cuda:-1"},
        [] { (void)default_generator(Device::cuda(-1)); });
  t.add("Generator of cuda:-3", Expect::Device, {"Generator", "cuda:-3"}, [] { Generator g(1, Device::cuda(-3)); });
  t.add("Generator::set_state with a device base", Expect::Error, {"set_state"}, [] {
    static const uint64_t base[2] = {0, 0};
    Generator g;
    g.set_state(PhiloxState{1, 0, base});
  });
  t.add("generator_for another device", Expect::Device, {"myop", "cuda:0", "cpu"},
        [] { (void)generator_for("myop", Device::cpu(), Generator(1, Device::cuda(0))); });
  t.add("GeneratorCapture twice on one device", Expect::Error, {"GeneratorCapture", "already"}, [] {
    GeneratorCapture a(Device::cpu());
    GeneratorCapture b(Device::cpu());
  });
  t.add("GeneratorCapture::draws past the end", Expect::Index, {"GeneratorCapture", "5"}, [] {
    GeneratorCapture c(Device::cpu());
    (void)c.draws(5);
  });
}

// --- views: core/ops/view.h and Tensor's view methods --------------------------------------------------

void view_rows(Table& t) {
  t.add("view with two -1", Expect::Shape, {"view", "only one"}, [] { (void)f32({4}).view({-1, -1}); });
  t.add("view with a size of -2", Expect::Shape, {"view", "-2"}, [] { (void)f32({4}).view({-2, 2}); });
  t.add("view to the wrong count", Expect::Shape, {"view", "[3]", "[4]"}, [] { (void)f32({4}).view({3}); });
  t.add("view -1 next to 0", Expect::Shape, {"view", "[-1, 0]"}, [] { (void)f32({4}).view({-1, 0}); });
  t.add("view of incompatible strides", Expect::Shape, {"view", "reshape"}, [] { (void)f32({2, 3}).t().view({6}); });
  t.add("view whose count wraps to 1", Expect::Shape, {"view", "274177"}, [] {
    (void)f32({1}).view({kWrapA, kWrapB});
  });
  t.add("view whose count wraps to 0", Expect::Shape, {"view", "4611686018427387904"}, [] {
    (void)f32({4}).view({kP62, 4});
  });
  t.add("view whose -1 product wraps", Expect::Shape, {"view", "274177"}, [] {
    (void)f32({1}).view({kWrapA, kWrapB, -1});
  });
  t.add("reshape whose count wraps to 1", Expect::Shape, {"reshape", "274177"}, [] {
    (void)f32({1}).reshape({kWrapA, kWrapB});
  });
  t.add("reshape with a size of -3", Expect::Shape, {"reshape", "-3"}, [] { (void)f32({3}).reshape({-3}); });
  t.add("permute: too few dims", Expect::Shape, {"permute", "[2, 3]"}, [] { (void)f32({2, 3}).permute({0}); });
  t.add("permute: repeated dim", Expect::Shape, {"permute", "repeats"}, [] { (void)f32({2, 3}).permute({0, 0}); });
  t.add("permute: dim out of range", Expect::Index, {"permute", "2"}, [] { (void)f32({2, 3}).permute({0, 2}); });
  t.add("transpose: dim out of range", Expect::Index, {"transpose", "2"}, [] { (void)f32({2, 3}).transpose(0, 2); });
  t.add("transpose of a 0-d tensor, dim 1", Expect::Index, {"transpose", "1"}, [] { (void)scalar0().transpose(0, 1); });
  t.add("t of a 3-d tensor", Expect::Shape, {"t:", "[2, 2, 2]"}, [] { (void)f32({2, 2, 2}).t(); });
  t.add("narrow of a 0-d tensor", Expect::Index, {"narrow", "0-d"}, [] { (void)scalar0().narrow(0, 0, 1); });
  t.add("narrow: start + length overflows", Expect::Index, {"narrow", "9223372036854775807"},
        [] { (void)f32({5}).narrow(0, 1, kMax); });
  t.add("narrow: length INT64_MAX from 0", Expect::Index, {"narrow", "9223372036854775807"},
        [] { (void)f32({5}).narrow(0, 0, kMax); });
  t.add("narrow past the end", Expect::Index, {"narrow", "size 5"}, [] { (void)f32({5}).narrow(0, -1, 2); });
  t.add("narrow: negative length", Expect::Index, {"narrow", "-1"}, [] { (void)f32({5}).narrow(0, 0, -1); });
  t.add("narrow: start INT64_MIN", Expect::Index, {"narrow", "size 5"}, [] { (void)f32({5}).narrow(0, kMin, 1); });
  t.add("narrow: dim out of range", Expect::Index, {"narrow", "2"}, [] { (void)f32({5}).narrow(2, 0, 1); });
  t.add("slice of a 0-d tensor", Expect::Index, {"slice", "0-d"}, [] { (void)scalar0().slice(0, 0, 1); });
  t.add("slice with step 0", Expect::Error, {"slice", "step", "0"}, [] { (void)f32({5}).slice(0, 0, 5, 0); });
  t.add("slice with a negative step", Expect::Error, {"slice", "step", "-1"},
        [] { (void)f32({5}).slice(0, 0, 5, -1); });
  t.add("slice: dim out of range", Expect::Index, {"slice", "1"}, [] { (void)f32({5}).slice(1, 0, 1); });
  t.add("select of a 0-d tensor", Expect::Index, {"select", "0-d"}, [] { (void)scalar0().select(0, 0); });
  t.add("select past the end", Expect::Index, {"select", "index 5", "size 5"}, [] { (void)f32({5}).select(0, 5); });
  t.add("select before the start", Expect::Index, {"select", "-6"}, [] { (void)f32({5}).select(0, -6); });
  t.add("select INT64_MIN", Expect::Index, {"select", "-9223372036854775808"}, [] { (void)f32({5}).select(0, kMin); });
  t.add("select: dim out of range", Expect::Index, {"select", "1"}, [] { (void)f32({5}).select(1, 0); });
  t.add("operator[] past the end", Expect::Index, {"select", "7"}, [] { (void)f32({3})[7]; });
  t.add("expand: size mismatch", Expect::Shape, {"expand", "[3]", "[2]"}, [] { (void)f32({3}).expand({2}); });
  t.add("expand: fewer dims", Expect::Shape, {"expand", "fewer"}, [] { (void)f32({2, 3}).expand({3}); });
  t.add("expand: -1 in a new dim", Expect::Shape, {"expand", "-1"}, [] { (void)f32({3}).expand({-1, 3}); });
  t.add("expand to a size of -2", Expect::Shape, {"expand", "-2"}, [] { (void)f32({1}).expand({-2}); });
  t.add("expand to a size of -5 in place of 1", Expect::Shape, {"expand", "-5"}, [] {
    (void)f32({1, 1}).expand({2, -5});
  });
  t.add("expand whose count overflows", Expect::Shape, {"expand", "4611686018427387904"}, [] {
    (void)f32({1, 1}).expand({kP62, kP62});
  });
  t.add("expand whose count wraps to 1", Expect::Shape, {"expand", "274177"}, [] {
    (void)f32({1, 1}).expand({kWrapA, kWrapB});
  });
  t.add("contiguous copy of INT64_MAX elements", Expect::Shape, {"clone", "9223372036854775807"},
        [] { (void)broadcast_of({kMax}).contiguous(); });
  t.add("contiguous copy of 4 PiB", Expect::OutOfMemory, {"clone", "1125899906842624"},
        [] { (void)broadcast_of({kP50}).contiguous(); });
  t.add("squeeze: dim out of range", Expect::Index, {"squeeze", "2"}, [] { (void)f32({1, 1}).squeeze(2); });
  t.add("squeeze(5) of a 0-d tensor", Expect::Index, {"squeeze", "5"}, [] { (void)scalar0().squeeze(5); });
  t.add("unsqueeze past the end", Expect::Index, {"unsqueeze", "3"}, [] { (void)f32({2}).unsqueeze(3); });
  t.add("unsqueeze before the start", Expect::Index, {"unsqueeze", "-3"}, [] { (void)f32({2}).unsqueeze(-3); });
  t.add("unsqueeze(2) of a 0-d tensor", Expect::Index, {"unsqueeze", "2"}, [] { (void)scalar0().unsqueeze(2); });
  t.add("flatten: start after end", Expect::Shape, {"flatten", "start_dim 2"}, [] {
    (void)f32({2, 3, 4}).flatten(2, 0);
  });
  t.add("flatten: end out of range", Expect::Index, {"flatten", "5"}, [] { (void)f32({2, 3, 4}).flatten(0, 5); });
  t.add("flatten(3) of a 0-d tensor", Expect::Index, {"flatten", "3"}, [] { (void)scalar0().flatten(3); });
  t.add("as_strided: mismatched lengths", Expect::Shape, {"as_strided", "[2]", "[1, 1]"}, [] {
    (void)f32({4}).as_strided({2}, {1, 1}, 0);
  });
  t.add("as_strided: negative size", Expect::Shape, {"as_strided", "[-1]"},
        [] { (void)f32({4}).as_strided({-1}, {1}, 0); });
  t.add("as_strided: negative stride", Expect::Shape, {"as_strided", "[-1]"},
        [] { (void)f32({4}).as_strided({2}, {-1}, 2); });
  t.add("as_strided: negative offset", Expect::Index, {"as_strided", "offset -1"},
        [] { (void)f32({4}).as_strided({2}, {1}, -1); });
  t.add("as_strided past the storage", Expect::Index, {"as_strided", "4 elements"},
        [] { (void)f32({4}).as_strided({3}, {2}, 0); });
  t.add("as_strided: extent overflows to negative", Expect::Index, {"as_strided", "9223372036854775807"},
        [] { (void)f32({4}).as_strided({3}, {kMax}, 0); });
  t.add("as_strided: offset + extent overflows", Expect::Index, {"as_strided", "9223372036854775807"},
        [] { (void)f32({4}).as_strided({2}, {1}, kMax); });
  t.add("as_strided whose count wraps to 1", Expect::Shape, {"as_strided", "274177"}, [] {
    (void)f32({4}).as_strided({kWrapA, kWrapB}, {0, 0}, 0);
  });
  t.add("as_strided of a tensor that requires grad", Expect::Autograd, {"as_strided"},
        [] { (void)leaf({4}).as_strided({2}, {1}, 0); });
  t.add("contiguous channels-last of a 3-d tensor", Expect::Shape, {"channels", "[2, 4, 3]"}, [] {
    (void)f32({2, 3, 4}).permute({0, 2, 1}).contiguous(MemoryFormat::ChannelsLast);
  });
}

// --- core/ops/shape.h ----------------------------------------------------------------------------------

void shape_rows(Table& t) {
  t.add("cat of nothing", Expect::Error, {"cat", "non-empty"}, [] { (void)cat({}); });
  t.add("cat of an undefined tensor", Expect::Error, {"cat", "tensor 1"}, [] { (void)cat({f32({2}), Tensor()}); });
  t.add("cat of 0-d tensors", Expect::Shape, {"cat", "zero-dimensional"}, [] { (void)cat({scalar0(), scalar0()}); });
  t.add("cat: dim out of range", Expect::Index, {"cat", "2"}, [] { (void)cat({f32({2}), f32({2})}, 2); });
  t.add("cat: dims differ", Expect::Shape, {"cat", "tensor 1", "[2, 2]"}, [] { (void)cat({f32({2}), f32({2, 2})}); });
  t.add("cat: sizes differ", Expect::Shape, {"cat", "[2, 3]"}, [] { (void)cat({f32({2, 2}), f32({2, 3})}, 0); });
  t.add("cat across devices", Expect::Device, {"cat", "cpu", "cuda:0"}, [] { (void)cat({f32({2}), fake_cuda({2})}); });
  t.add("cat whose total overflows", Expect::Shape, {"cat", "4611686018427387904"}, [] {
    Tensor b = broadcast_of({kP62});
    (void)cat({b, b, b});
  });
  t.add("stack of nothing", Expect::Error, {"stack", "non-empty"}, [] { (void)stack({}); });
  t.add("stack of different shapes", Expect::Shape, {"stack", "[3]"}, [] { (void)stack({f32({2}), f32({3})}); });
  t.add("stack: dim out of range", Expect::Index, {"stack", "3"}, [] { (void)stack({f32({2}), f32({2})}, 3); });
  t.add("stack of an undefined tensor", Expect::Error, {"stack", "tensor 1"}, [] {
    (void)stack({f32({2}), Tensor()});
  });
  t.add("split of size 0", Expect::Error, {"split", "split_size", "0"}, [] { (void)split(f32({4}), 0); });
  t.add("split of a negative size", Expect::Error, {"split", "-1"}, [] { (void)split(f32({4}), -1); });
  t.add("split of an empty dim by a negative size", Expect::Error, {"split", "-2", "size 0"}, [] {
    (void)split(f32({3, 0}), -2, 1);
  });
  t.add("split of a 0-d tensor", Expect::Index, {"split", "0-d"}, [] { (void)split(scalar0(), 1); });
  t.add("split: dim out of range", Expect::Index, {"split", "1"}, [] { (void)split(f32({4}), 1, 1); });
  t.add("split of undefined", Expect::Error, {"split", "undefined"}, [] { (void)split(Tensor(), 1); });
  t.add("split_with_sizes: negative size", Expect::Shape, {"split", "[-1, 5]"}, [] {
    (void)split_with_sizes(f32({4}), {-1, 5});
  });
  t.add("split_with_sizes: wrong sum", Expect::Shape, {"split", "sum to 3"}, [] {
    (void)split_with_sizes(f32({4}), {1, 2});
  });
  t.add("split_with_sizes whose sum wraps", Expect::Shape, {"split", "9223372036854775807"}, [] {
    (void)split_with_sizes(f32({1}), {kMax, kMax, 3});
  });
  t.add("chunk of 0 chunks", Expect::Error, {"chunk", "chunks", "0"}, [] { (void)chunk(f32({4}), 0); });
  t.add("chunk of -2 chunks", Expect::Error, {"chunk", "-2"}, [] { (void)chunk(f32({4}), -2); });
  t.add("chunk of a 0-d tensor", Expect::Index, {"chunk", "0-d"}, [] { (void)chunk(scalar0(), 1); });
  t.add("chunk: dim out of range", Expect::Index, {"chunk", "-2"}, [] { (void)chunk(f32({4}), 2, -2); });
}

// --- core/ops/elementwise.h, in-place ops and copies --------------------------------------------------

void elementwise_rows(Table& t) {
  t.add("add: shapes do not broadcast", Expect::Shape, {"add", "[2, 3]", "[4]"}, [] {
    (void)add(f32({2, 3}), f32({4}));
  });
  t.add("sub: shapes do not broadcast", Expect::Shape, {"sub", "[2]", "[3]"}, [] { (void)sub(f32({2}), f32({3})); });
  t.add("mul: shapes do not broadcast", Expect::Shape, {"mul", "[2]", "[3]"}, [] { (void)mul(f32({2}), f32({3})); });
  t.add("div: shapes do not broadcast", Expect::Shape, {"div", "[2]", "[3]"}, [] { (void)div(f32({2}), f32({3})); });
  t.add("pow: shapes do not broadcast", Expect::Shape, {"pow", "[2]", "[3]"}, [] { (void)pow(f32({2}), f32({3})); });
  t.add("maximum: shapes do not broadcast", Expect::Shape, {"maximum"}, [] { (void)maximum(f32({2}), f32({3})); });
  t.add("minimum: shapes do not broadcast", Expect::Shape, {"minimum"}, [] { (void)minimum(f32({2}), f32({3})); });
  t.add("eq: shapes do not broadcast", Expect::Shape, {"eq"}, [] { (void)eq(f32({2}), f32({3})); });
  t.add("lt: shapes do not broadcast", Expect::Shape, {"lt"}, [] { (void)lt(f32({2}), f32({3})); });
  t.add("logical_and: shapes do not broadcast", Expect::Shape, {"logical_and"},
        [] { (void)logical_and(zeros({2}, DType::Bool), zeros({3}, DType::Bool)); });
  t.add("add of undefined", Expect::Error, {"add", "undefined"}, [] { (void)add(f32({2}), Tensor()); });
  t.add("mul of undefined", Expect::Error, {"mul", "undefined"}, [] { (void)mul(Tensor(), f32({2})); });
  t.add("div of undefined", Expect::Error, {"div", "undefined"}, [] { (void)div(Tensor(), 2.0); });
  t.add("neg of undefined", Expect::Error, {"neg", "undefined"}, [] { (void)neg(Tensor()); });
  t.add("where of undefined values", Expect::Error, {"where", "undefined"},
        [] { (void)where(zeros({2}, DType::Bool), Tensor(), f32({2})); });
  t.add("add: float alpha on int tensors", Expect::DType, {"add", "alpha", "int64"},
        [] { (void)add(i64({2}), i64({2}), 0.5); });
  t.add("sub of bool tensors", Expect::DType, {"sub", "bool"},
        [] { (void)sub(zeros({2}, DType::Bool), zeros({2}, DType::Bool)); });
  t.add("neg of a bool tensor", Expect::DType, {"neg", "bool"}, [] { (void)neg(zeros({2}, DType::Bool)); });
  t.add("relu of a bool tensor", Expect::DType, {"relu", "bool"}, [] { (void)relu(zeros({2}, DType::Bool)); });
  t.add("gelu of an int tensor", Expect::DType, {"gelu", "int64"}, [] { (void)gelu(i64({2})); });
  t.add("pow of an int tensor to -1", Expect::Error, {"pow", "-1"}, [] { (void)pow(i64({2}), -1); });
  t.add("clamp without bounds", Expect::Error, {"clamp", "at least one"},
        [] { (void)clamp(f32({2}), std::nullopt, std::nullopt); });
  t.add("where with an int condition", Expect::DType, {"where", "int64"},
        [] { (void)where(i64({2}), f32({2}), f32({2})); });
  t.add("where: shapes do not broadcast", Expect::Shape, {"where", "[3]"},
        [] { (void)where(zeros({2}, DType::Bool), f32({3}), f32({2})); });
  t.add("masked_fill with an int mask", Expect::DType, {"masked_fill", "int64"},
        [] { (void)masked_fill(f32({2}), i64({2}), 1.0); });
  t.add("masked_fill: mask larger than input", Expect::Shape, {"masked_fill", "[2, 2]"}, [] {
    (void)masked_fill(f32({2}), zeros({2, 2}, DType::Bool), 1.0);
  });
  t.add("masked_fill of an int32 tensor with 3e9", Expect::Error, {"masked_fill", "int32", "3e+09", "overflow"},
        [] { (void)masked_fill(zeros({2}, DType::Int32), zeros({2}, DType::Bool), 3e9); });
  t.add("masked_fill of a float16 tensor with 1e5", Expect::Error, {"masked_fill", "float16", "1e+05"},
        [] { (void)masked_fill(zeros({2}, DType::Float16), zeros({2}, DType::Bool), 1e5); });
  t.add("masked_fill of an int tensor with NaN", Expect::Error, {"masked_fill", "int64", "nan"},
        [] { (void)masked_fill(i64({2}), zeros({2}, DType::Bool), std::nan("")); });
  t.add("add across devices", Expect::Device, {"add", "cpu", "cuda:0"}, [] { (void)add(f32({2}), fake_cuda({2})); });
  t.add("mul across devices", Expect::Device, {"mul", "cpu", "cuda:0"}, [] { (void)mul(fake_cuda({2}), f32({2})); });
  t.add("mul of a CUDA tensor and a 0-d CPU tensor", Expect::Device, {"mul", "cuda:0 (shape [2])", "0-d", "item()"},
        [] { (void)mul(fake_cuda({2}), scalar_tensor(2.0)); });
  t.add("add_ of a 0-d CPU tensor into a CUDA tensor", Expect::Device, {"add_", "cpu (shape [])", "item()"},
        [] { fake_cuda({2}).add_(scalar_tensor(2.0)); });
  t.add("where across devices", Expect::Device, {"where", "cpu", "cuda:0"},
        [] { (void)where(zeros({2}, DType::Bool), f32({2}), fake_cuda({2})); });
  t.add("mul of 2^40 x 2^40 broadcasts", Expect::Shape, {"mul", "[1099511627776, 1099511627776]"}, [] {
    (void)mul(broadcast_of({int64_t{1} << 40, 1}), broadcast_of({1, int64_t{1} << 40}));
  });
  t.add("add of 4 PiB", Expect::OutOfMemory, {"add", "1125899906842624"},
        [] { (void)add(broadcast_of({kP50}), broadcast_of({kP50})); });
  t.add("exp of 4 PiB", Expect::OutOfMemory, {"exp", "1125899906842624"}, [] { (void)exp(broadcast_of({kP50})); });
  t.add("broadcast_shapes of 2 and 3", Expect::Shape, {"myop", "[2]", "[3]"},
        [] { (void)broadcast_shapes({2}, {3}, "myop"); });
  t.add("broadcast_shapes of a negative size", Expect::Shape, {"myop", "-2"},
        [] { (void)broadcast_shapes({-2}, {1}, "myop"); });
  t.add("sum_to a shape that does not broadcast", Expect::Shape, {"sum_to", "[2, 3]", "[4]"}, [] {
    (void)sum_to(f32({2, 3}), {4});
  });
  t.add("sum_to a shape with more dims", Expect::Shape, {"sum_to", "[2]", "[2, 2]"}, [] {
    (void)sum_to(f32({2}), {2, 2});
  });

  t.add("add_: operand does not broadcast to self", Expect::Shape, {"add_", "[2, 2]", "[2]"}, [] {
    f32({2}).add_(f32({2, 2}));
  });
  t.add("add_ of a float into an int tensor", Expect::DType, {"add_", "float32", "int64"},
        [] { i64({2}).add_(f32({2})); });
  t.add("add_ of a float scalar into an int tensor", Expect::DType, {"add_", "float32", "int64"},
        [] { i64({2}).add_(0.5); });
  t.add("div_ of an int tensor", Expect::DType, {"div_", "int64"}, [] { i64({2}).div_(i64({2})); });
  t.add("mul_ of a bool tensor by a float", Expect::DType, {"mul_", "bool"}, [] { zeros({2}, DType::Bool).mul_(1.5); });
  t.add("sub_ of bool tensors", Expect::DType, {"sub_", "bool"},
        [] { zeros({2}, DType::Bool).sub_(zeros({2}, DType::Bool)); });
  t.add("add_ on a leaf that requires grad", Expect::Autograd, {"add_", "leaf"}, [] { leaf({2}).add_(1.0); });
  t.add("mul_ on a view of a leaf that requires grad", Expect::Autograd, {"mul_", "view"}, [] {
    (void)leaf({2, 2}).select(0, 0).mul_(2.0);
  });
  t.add("add_ across devices", Expect::Device, {"add_", "cpu", "cuda:0"}, [] { f32({2}).add_(fake_cuda({2})); });
  t.add("copy_: source does not broadcast", Expect::Shape, {"copy_", "[3]", "[2]"}, [] { f32({2}).copy_(f32({3})); });
  t.add("fill_ of a uint8 tensor with 256", Expect::Error, {"fill_", "256", "uint8", "overflow"},
        [] { zeros({2}, DType::UInt8).fill_(256); });
  t.add("fill_ of a uint8 tensor with -256", Expect::Error, {"fill_", "-256", "uint8"},
        [] { zeros({2}, DType::UInt8).fill_(-256); });
  t.add("fill_ of a uint8 tensor with -0.5", Expect::Error, {"fill_", "-0.5", "uint8"},
        [] { zeros({2}, DType::UInt8).fill_(-0.5); });
  t.add("fill_ of an int64 tensor with 2^63", Expect::Error, {"fill_", "int64"}, [] { i64({2}).fill_(0x1p63); });
  t.add("fill_ of an int tensor with inf", Expect::Error, {"fill_", "inf", "int32"},
        [] { zeros({2}, DType::Int32).fill_(INFINITY); });
  t.add("fill_ of a bfloat16 tensor with 1e39", Expect::Error, {"fill_", "1e+39", "bfloat16"},
        [] { zeros({2}, DType::BFloat16).fill_(1e39); });
  t.add("masked_fill_ with an int mask", Expect::DType, {"masked_fill", "int64"},
        [] { f32({2}).masked_fill_(i64({2}), 1.0); });
  t.add("clamp_ of an int tensor by floats", Expect::DType, {"clamp_", "int64"},
        [] { i64({2}).clamp_(Scalar(0.5), Scalar(1.5)); });
  t.add("clamp_ without bounds", Expect::Error, {"clamp"}, [] { f32({2}).clamp_(std::nullopt, std::nullopt); });
}

// --- core/ops/reduce.h ---------------------------------------------------------------------------------

void reduce_rows(Table& t) {
  t.add("sum: dim out of range", Expect::Index, {"sum", "2"}, [] { (void)sum(f32({2, 2}), {2}); });
  t.add("sum: a dim twice", Expect::Shape, {"sum", "twice"}, [] { (void)sum(f32({2, 2}), {0, 0}); });
  t.add("sum: a dim twice, once negative", Expect::Shape, {"sum", "twice"}, [] { (void)sum(f32({2, 2}), {0, -2}); });
  t.add("sum(dim 1) of a 0-d tensor", Expect::Index, {"sum", "1"}, [] { (void)sum(scalar0(), {1}); });
  t.add("sum of a 0-d tensor over dim 0 twice", Expect::Shape, {"sum", "twice"},
        [] { (void)sum(scalar0(), {0, -1}); });
  t.add("sum of undefined", Expect::Error, {"sum", "undefined"}, [] { (void)sum(Tensor()); });
  t.add("mean of an int tensor", Expect::DType, {"mean", "int64"}, [] { (void)mean(i64({2})); });
  t.add("mean: dim out of range", Expect::Index, {"mean", "-3"}, [] { (void)mean(f32({2, 2}), {-3}); });
  t.add("var of an int tensor", Expect::DType, {"var", "int64"}, [] { (void)var(i64({2})); });
  t.add("var of undefined", Expect::Error, {"var", "undefined"}, [] { (void)var(Tensor()); });
  t.add("max of an empty tensor", Expect::Shape, {"max", "[0]"}, [] { (void)max(f32({0})); });
  t.add("min of an empty tensor", Expect::Shape, {"min", "[2, 0]"}, [] { (void)min(f32({2, 0})); });
  t.add("amax: dim out of range", Expect::Index, {"amax", "3"}, [] { (void)amax(f32({2, 2}), {3}); });
  t.add("amin of an empty dim", Expect::Shape, {"amin", "[2, 0]"}, [] { (void)amin(f32({2, 0}), {1}); });
  t.add("max(dim): dim out of range", Expect::Index, {"max", "2"}, [] { (void)max(f32({2, 2}), 2); });
  t.add("min(dim) of an empty dim", Expect::Shape, {"min", "[0, 3]"}, [] { (void)min(f32({0, 3}), 0); });
  t.add("argmax of an empty tensor", Expect::Shape, {"argmax", "[0]"}, [] { (void)argmax(f32({0})); });
  t.add("argmin: dim out of range", Expect::Index, {"argmin", "5"}, [] { (void)argmin(f32({2}), 5); });
  t.add("any: dim out of range", Expect::Index, {"any", "3"}, [] { (void)any(zeros({2}, DType::Bool), {3}); });
  t.add("all of undefined", Expect::Error, {"all", "undefined"}, [] { (void)all(Tensor()); });
  t.add("max(dim 1) of a 0-d tensor", Expect::Index, {"max", "1"}, [] { (void)max(scalar0(), 1); });
}

// --- core/ops/index.h ----------------------------------------------------------------------------------

void index_rows(Table& t) {
  t.add("index_select with a float index", Expect::DType, {"index_select", "float32"},
        [] { (void)index_select(f32({3}), 0, f32({1})); });
  t.add("index_select with a 2-d index", Expect::Shape, {"index_select", "[1, 1]"}, [] {
    (void)index_select(f32({3}), 0, i64({1, 1}));
  });
  t.add("index_select: dim out of range", Expect::Index, {"index_select", "1"},
        [] { (void)index_select(f32({3}), 1, i64({1})); });
  t.add("index_select past the end", Expect::Index, {"index_select", "5"},
        [] { (void)index_select(f32({3}), 0, tensor({int64_t{5}})); });
  t.add("index_select of a negative index", Expect::Index, {"index_select", "-1"},
        [] { (void)index_select(f32({3}), 0, tensor({int64_t{-1}})); });
  t.add("index_select of INT64_MIN", Expect::Index, {"index_select", "-9223372036854775808"},
        [] { (void)index_select(f32({3}), 0, tensor({kMin})); });
  t.add("index_select into an empty dim", Expect::Index, {"index_select", "size 0"}, [] {
    (void)index_select(f32({0, 2}), 0, i64({1}));
  });
  t.add("index_select past the end when the output is empty", Expect::Index, {"index_select", "7", "size 3"}, [] {
    (void)index_select(f32({0, 3}), 1, tensor({int64_t{7}}));
  });
  t.add("index_select of an undefined index", Expect::Error, {"index_select", "undefined"},
        [] { (void)index_select(f32({3}), 0, Tensor()); });
  t.add("index_select across devices", Expect::Device, {"index_select", "cpu", "cuda:0"},
        [] { (void)index_select(f32({3}), 0, fake_cuda({1}, DType::Int64)); });
  t.add("index_select(1) of a 0-d tensor past the end", Expect::Index, {"index_select", "1"},
        [] { (void)index_select(scalar0(), 0, tensor({int64_t{1}})); });
  t.add("index_select of a 0-d tensor by two indices", Expect::Shape, {"index_select", "0-d", "got 2", "[2]"}, [] {
    (void)index_select(scalar0(), 0, tensor({int64_t{0}, int64_t{0}}));
  });
  t.add("index_select of a 0-d tensor by no index", Expect::Shape, {"index_select", "got 0"},
        [] { (void)index_select(scalar0(), 0, i64({0})); });
  t.add("gather of a 0-d tensor at 1", Expect::Index, {"gather", "1"},
        [] { (void)gather(scalar0(), 0, tensor({int64_t{1}})); });
  t.add("gather: index dims differ", Expect::Shape, {"gather", "[2, 2]", "[2]"}, [] {
    (void)gather(f32({2, 2}), 0, i64({2}));
  });
  t.add("gather: dim out of range", Expect::Index, {"gather", "2"}, [] { (void)gather(f32({2, 2}), 2, i64({2, 2})); });
  t.add("gather past the end", Expect::Index, {"gather", "3"}, [] {
    (void)gather(f32({2, 2}), 1, tensor({int64_t{0}, int64_t{3}}, {1, 2}));
  });
  t.add("gather of a negative index", Expect::Index, {"gather", "-1"}, [] {
    (void)gather(f32({2, 2}), 0, tensor({int64_t{-1}}, {1, 1}));
  });
  t.add("gather: index larger than input", Expect::Shape, {"gather", "[3, 1]"}, [] {
    (void)gather(f32({2, 2}), 1, i64({3, 1}));
  });
  t.add("gather with a float index", Expect::DType, {"gather", "float32"}, [] { (void)gather(f32({2}), 0, f32({2})); });
  t.add("gather(dim 1) of a 0-d tensor", Expect::Index, {"gather", "1"}, [] { (void)gather(scalar0(), 1, i64({})); });
  t.add("scatter_add: dtypes differ", Expect::DType, {"scatter_add", "float64", "float32"},
        [] { (void)scatter_add(f32({3}), 0, i64({2}), f64({2})); });
  t.add("scatter_add past the end", Expect::Index, {"scatter_add", "7"},
        [] { (void)scatter_add(f32({3}), 0, tensor({int64_t{7}}, {1}), f32({1})); });
  t.add("scatter_add of a negative index", Expect::Index, {"scatter_add", "-2"},
        [] { (void)scatter_add(f32({3}), 0, tensor({int64_t{-2}}, {1}), f32({1})); });
  t.add("scatter_add: src smaller than index", Expect::Shape, {"scatter_add", "[1]"},
        [] { (void)scatter_add(f32({3}), 0, i64({2}), f32({1})); });
  t.add("scatter_add: dims differ", Expect::Shape, {"scatter_add", "[2, 1]"}, [] {
    (void)scatter_add(f32({3}), 0, i64({2, 1}), f32({2, 1}));
  });
  t.add("scatter_add of undefined src", Expect::Error, {"scatter_add", "src", "undefined"},
        [] { (void)scatter_add(f32({3}), 0, i64({1}), Tensor()); });
  t.add("scatter_add: dim out of range", Expect::Index, {"scatter_add", "-2"},
        [] { (void)scatter_add(f32({3}), -2, i64({1}), f32({1})); });
}

// --- core/ops/matmul.h, conv.h, pool.h -----------------------------------------------------------------

void matmul_conv_pool_rows(Table& t) {
  t.add("matmul of a 0-d operand", Expect::Shape, {"matmul", "[]"}, [] { (void)matmul(scalar0(), f32({2})); });
  t.add("matmul: inner dims differ", Expect::Shape, {"matmul", "[2, 3]", "[4, 5]"}, [] {
    (void)matmul(f32({2, 3}), f32({4, 5}));
  });
  t.add("matmul of 1-d vectors of different lengths", Expect::Shape, {"matmul", "[3]", "[4]"},
        [] { (void)matmul(f32({3}), f32({4})); });
  t.add("matmul: dtypes differ", Expect::DType, {"matmul", "float32", "float64"}, [] {
    (void)matmul(f32({2, 2}), f64({2, 2}));
  });
  t.add("matmul of int tensors", Expect::DType, {"matmul", "int64"}, [] { (void)matmul(i64({2, 2}), i64({2, 2})); });
  t.add("matmul: batch dims do not broadcast", Expect::Shape, {"matmul", "[2, 2, 2]", "[3, 2, 2]"}, [] {
    (void)matmul(f32({2, 2, 2}), f32({3, 2, 2}));
  });
  t.add("matmul of undefined", Expect::Error, {"matmul", "undefined"}, [] { (void)matmul(f32({2, 2}), Tensor()); });
  t.add("matmul across devices", Expect::Device, {"matmul", "cpu", "cuda:0"}, [] {
    (void)matmul(f32({2, 2}), fake_cuda({2, 2}));
  });
  t.add("matmul whose output bytes overflow", Expect::Shape, {"matmul", "[2147483648, 2147483648]"}, [] {
    (void)matmul(broadcast_of({int64_t{1} << 31, 1}), broadcast_of({1, int64_t{1} << 31}));
  });
  t.add("linear: 3-d weight", Expect::Shape, {"linear", "[2, 2, 2]"}, [] { (void)linear(f32({2}), f32({2, 2, 2})); });
  t.add("linear: feature mismatch", Expect::Shape, {"linear", "3 features", "[4, 2]"}, [] {
    (void)linear(f32({3}), f32({4, 2}));
  });
  t.add("linear: bias mismatch", Expect::Shape, {"linear", "bias", "[3]"}, [] {
    (void)linear(f32({2}), f32({4, 2}), f32({3}));
  });
  t.add("linear: dtypes differ", Expect::DType, {"linear", "float64", "float32"}, [] {
    (void)linear(f32({2}), f64({4, 2}));
  });
  t.add("linear of undefined weight", Expect::Error, {"linear", "weight", "undefined"},
        [] { (void)linear(f32({2}), Tensor()); });
  t.add("linear of a 0-d input", Expect::Shape, {"linear", "[]"}, [] { (void)linear(scalar0(), f32({4, 1})); });
  t.add("linear across devices", Expect::Device, {"linear", "cpu", "cuda:0"}, [] {
    (void)linear(f32({2}), fake_cuda({4, 2}));
  });

  t.add("conv2d of a 3-d input", Expect::Shape, {"conv2d", "[1, 4, 4]"}, [] {
    (void)conv2d(f32({1, 4, 4}), f32({1, 1, 3, 3}));
  });
  t.add("conv2d of a 3-d weight", Expect::Shape, {"conv2d", "weight", "[1, 3, 3]"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 3, 3}));
  });
  t.add("conv2d of an int input", Expect::DType, {"conv2d", "int64"}, [] {
    (void)conv2d(i64({1, 1, 4, 4}), i64({1, 1, 3, 3}));
  });
  t.add("conv2d: dtypes differ", Expect::DType, {"conv2d", "float64"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f64({1, 1, 3, 3}));
  });
  t.add("conv2d with groups 0", Expect::Error, {"conv2d", "groups", "0"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 0);
  });
  t.add("conv2d with stride 0", Expect::Error, {"conv2d", "stride", "0x1"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), Tensor(), {0, 1});
  });
  t.add("conv2d with dilation 0", Expect::Error, {"conv2d", "dilation"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 0});
  });
  t.add("conv2d with negative padding", Expect::Error, {"conv2d", "padding", "-1x0"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), Tensor(), {1, 1}, {-1, 0});
  });
  t.add("conv2d: channel mismatch", Expect::Shape, {"conv2d", "2 channels"}, [] {
    (void)conv2d(f32({1, 2, 4, 4}), f32({1, 1, 3, 3}));
  });
  t.add("conv2d: groups do not divide channels", Expect::Shape, {"conv2d", "groups 2"}, [] {
    (void)conv2d(f32({1, 3, 4, 4}), f32({2, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
  });
  t.add("conv2d: bias of the wrong size", Expect::Shape, {"conv2d", "bias", "[2]"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), f32({2}));
  });
  t.add("conv2d: kernel larger than input", Expect::Shape, {"conv2d", "kernel 5x5"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 5, 5}));
  });
  t.add("conv2d: kernel of size 0", Expect::Shape, {"conv2d", "kernel size"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 0, 3}));
  });
  t.add("conv2d of undefined weight", Expect::Error, {"conv2d", "weight", "undefined"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), Tensor());
  });
  t.add("conv2d across devices", Expect::Device, {"conv2d", "cpu", "cuda:0"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), fake_cuda({1, 1, 3, 3}));
  });
  t.add("conv2d: padding overflows", Expect::Shape, {"conv2d", "4611686018427387904"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), Tensor(), {1, 1}, {kP62, 0});
  });
  t.add("conv2d: dilation overflows", Expect::Shape, {"conv2d", "9223372036854775807"}, [] {
    (void)conv2d(f32({1, 1, 4, 4}), f32({1, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {kMax, 1});
  });

  t.add("max_pool2d of a 2-d input", Expect::Shape, {"max_pool2d", "[4, 4]"}, [] {
    (void)max_pool2d(f32({4, 4}), {2, 2});
  });
  t.add("max_pool2d with kernel 0", Expect::Error, {"max_pool2d", "kernel", "0x2"}, [] {
    (void)max_pool2d(f32({1, 4, 4}), {0, 2});
  });
  t.add("max_pool2d with one zero stride", Expect::Error, {"max_pool2d", "stride must be positive", "0x2"}, [] {
    (void)max_pool2d(f32({1, 1, 4, 4}), {2, 2}, {0, 2});
  });
  t.add("avg_pool2d with one zero stride", Expect::Error, {"avg_pool2d", "stride must be positive", "2x0"}, [] {
    (void)avg_pool2d(f32({1, 1, 4, 4}), {2, 2}, {2, 0});
  });
  t.add("max_pool2d with a negative stride", Expect::Error, {"max_pool2d", "stride", "-1x1"}, [] {
    (void)max_pool2d(f32({1, 4, 4}), {2, 2}, {-1, 1});
  });
  t.add("max_pool2d with padding over half the kernel", Expect::Error, {"max_pool2d", "padding", "2x0"}, [] {
    (void)max_pool2d(f32({1, 4, 4}), {2, 2}, {0, 0}, {2, 0});
  });
  t.add("max_pool2d with dilation 0", Expect::Error, {"max_pool2d", "dilation"}, [] {
    (void)max_pool2d(f32({1, 4, 4}), {2, 2}, {0, 0}, {0, 0}, {0, 1});
  });
  t.add("max_pool2d of an int input", Expect::DType, {"max_pool2d", "int64"}, [] {
    (void)max_pool2d(i64({1, 4, 4}), {2, 2});
  });
  t.add("max_pool2d: window larger than input", Expect::Shape, {"max_pool2d", "output size"}, [] {
    (void)max_pool2d(f32({1, 2, 2}), {3, 3});
  });
  t.add("max_pool2d of undefined", Expect::Error, {"max_pool2d", "undefined"}, [] {
    (void)max_pool2d(Tensor(), {2, 2});
  });
  t.add("max_pool2d: dilation x kernel overflows", Expect::Shape, {"max_pool2d", "9223372036854775807"}, [] {
    (void)max_pool2d(f32({1, 4, 4}), {kMax, 1}, {1, 1}, {0, 0}, {2, 1});
  });
  t.add("avg_pool2d of a 5-d input", Expect::Shape, {"avg_pool2d", "[1, 1, 1, 4, 4]"}, [] {
    (void)avg_pool2d(f32({1, 1, 1, 4, 4}), {2, 2});
  });
  t.add("avg_pool2d with kernel 0", Expect::Error, {"avg_pool2d", "kernel"}, [] {
    (void)avg_pool2d(f32({1, 4, 4}), {2, 0});
  });
  t.add("avg_pool2d with negative padding", Expect::Error, {"avg_pool2d", "padding", "-1x0"}, [] {
    (void)avg_pool2d(f32({1, 4, 4}), {2, 2}, {0, 0}, {-1, 0});
  });
  t.add("avg_pool2d of a bool input", Expect::DType, {"avg_pool2d", "bool"}, [] {
    (void)avg_pool2d(zeros({1, 4, 4}, DType::Bool), {2, 2});
  });
  t.add("adaptive_avg_pool2d to size 0", Expect::Shape, {"adaptive_avg_pool2d", "0x1"}, [] {
    (void)adaptive_avg_pool2d(f32({1, 4, 4}), {0, 1});
  });
  t.add("adaptive_avg_pool2d of a 2-d input", Expect::Shape, {"adaptive_avg_pool2d", "[4, 4]"}, [] {
    (void)adaptive_avg_pool2d(f32({4, 4}), {1, 1});
  });
  t.add("adaptive_avg_pool2d of an empty image", Expect::Shape, {"adaptive_avg_pool2d", "[1, 0, 4]"}, [] {
    (void)adaptive_avg_pool2d(f32({1, 0, 4}), {1, 1});
  });
  t.add("adaptive_avg_pool2d of an int input", Expect::DType, {"adaptive_avg_pool2d", "int64"}, [] {
    (void)adaptive_avg_pool2d(i64({1, 4, 4}), {1, 1});
  });
  t.add("adaptive_avg_pool2d whose output count overflows", Expect::Shape, {"adaptive_avg_pool2d", "1099511627776"},
        [] {
          (void)adaptive_avg_pool2d(f32({1, 1, 4, 4}), {int64_t{1} << 40, int64_t{1} << 40});
        });
  t.add("adaptive_avg_pool2d to 4 TiB", Expect::OutOfMemory, {"adaptive_avg_pool2d", "1048576"}, [] {
    (void)adaptive_avg_pool2d(f32({1, 1, 4, 4}), {int64_t{1} << 20, int64_t{1} << 20});
  });
}

// --- softmax, norms, dropout, embedding, losses, attention, topk, triangles -----------------------------

void nn_op_rows(Table& t) {
  t.add("softmax: dim out of range", Expect::Index, {"softmax", "2"}, [] { (void)softmax(f32({2, 2}), 2); });
  t.add("softmax of an int tensor", Expect::DType, {"softmax", "int64"}, [] { (void)softmax(i64({2}), 0); });
  t.add("softmax of undefined", Expect::Error, {"softmax", "undefined"}, [] { (void)softmax(Tensor(), 0); });
  t.add("log_softmax: dim out of range", Expect::Index, {"log_softmax", "-3"}, [] {
    (void)log_softmax(f32({2, 2}), -3);
  });
  t.add("softmax(dim 1) of a 0-d tensor", Expect::Index, {"softmax", "1"}, [] { (void)softmax(scalar0(), 1); });

  t.add("layer_norm over no dims", Expect::Shape, {"layer_norm", "normalized_shape"}, [] {
    (void)layer_norm(f32({2, 3}), {});
  });
  t.add("layer_norm: shape mismatch", Expect::Shape, {"layer_norm", "[2, 3]", "[4]"}, [] {
    (void)layer_norm(f32({2, 3}), {4});
  });
  t.add("layer_norm: more dims than the input", Expect::Shape, {"layer_norm", "[1, 2, 3]"}, [] {
    (void)layer_norm(f32({2, 3}), {1, 2, 3});
  });
  t.add("layer_norm: weight of the wrong shape", Expect::Shape, {"layer_norm", "weight", "[2]"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, f32({2}));
  });
  t.add("layer_norm of an int tensor", Expect::DType, {"layer_norm", "int64"}, [] {
    (void)layer_norm(i64({2, 3}), {3});
  });
  t.add("layer_norm: int weight", Expect::DType, {"layer_norm", "weight", "int64"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, i64({3}));
  });
  t.add("layer_norm: weight and bias dtypes differ", Expect::DType, {"layer_norm", "float32", "float64"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, f32({3}), f64({3}));
  });
  t.add("layer_norm with negative eps", Expect::Error, {"layer_norm", "eps", "-1"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, Tensor(), Tensor(), -1.0);
  });
  t.add("layer_norm with NaN eps", Expect::Error, {"layer_norm", "eps", "nan"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, Tensor(), Tensor(), kNaN);
  });
  t.add("layer_norm with infinite eps", Expect::Error, {"layer_norm", "eps", "inf"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, Tensor(), Tensor(), kInf);
  });
  t.add("layer_norm across devices", Expect::Device, {"layer_norm", "cpu", "cuda:0"}, [] {
    (void)layer_norm(f32({2, 3}), {3}, fake_cuda({3}));
  });

  t.add("batch_norm of a 1-d input", Expect::Shape, {"batch_norm", "[4]"},
        [] { (void)batch_norm(f32({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); });
  t.add("batch_norm of an int input", Expect::DType, {"batch_norm", "int64"}, [] {
    (void)batch_norm(i64({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true);
  });
  t.add("batch_norm: weight of the wrong size", Expect::Shape, {"batch_norm", "weight", "[3]"}, [] {
    (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), f32({3}), Tensor(), true);
  });
  t.add("batch_norm: running_mean alone", Expect::Error, {"batch_norm", "running_mean"}, [] {
    (void)batch_norm(f32({2, 2}), f32({2}), Tensor(), Tensor(), Tensor(), true);
  });
  t.add("batch_norm in eval without running stats", Expect::Error, {"batch_norm", "eval"}, [] {
    (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), false);
  });
  t.add("batch_norm with one value per channel", Expect::Shape, {"batch_norm", "[1, 2]"}, [] {
    (void)batch_norm(f32({1, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true);
  });
  t.add("batch_norm with negative eps", Expect::Error, {"batch_norm", "eps"}, [] {
    (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, -1.0);
  });
  t.add("batch_norm with momentum 2", Expect::Error, {"batch_norm", "momentum", "2"}, [] {
    (void)batch_norm(f32({2, 2}), f32({2}), ones({2}), Tensor(), Tensor(), true, 2.0);
  });
  t.add("batch_norm with NaN momentum", Expect::Error, {"batch_norm", "momentum", "nan"}, [] {
    (void)batch_norm(f32({2, 2}), f32({2}), ones({2}), Tensor(), Tensor(), true, kNaN);
  });
  t.add("batch_norm: int running_var", Expect::DType, {"batch_norm", "running_var", "int64"}, [] {
    (void)batch_norm(f32({2, 2}), f32({2}), i64({2}), Tensor(), Tensor(), true);
  });
  t.add("batch_norm across devices", Expect::Device, {"batch_norm", "cpu", "cuda:0"}, [] {
    (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), fake_cuda({2}), Tensor(), true);
  });
  t.add("batch_norm: a residual on another device", Expect::Device, {"batch_norm", "cpu", "cuda:0"}, [] {
    (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                     {.residual = fake_cuda({2, 2}), .relu = true});
  });
  t.add("batch_norm: a residual of another shape", Expect::Shape, {"batch_norm", "residual", "[2, 1]", "[2, 2]"}, [] {
    (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                     {.residual = f32({2, 1}), .relu = false});
  });
  t.add("batch_norm: a residual of another dtype", Expect::DType, {"batch_norm", "residual", "float64", "float32"},
        [] {
          (void)batch_norm(f32({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                           {.residual = f64({2, 2}), .relu = true});
        });
  t.add("batch_norm: an undefined residual's ReLU on an int input", Expect::DType, {"batch_norm", "int64"}, [] {
    (void)batch_norm(i64({2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                     {.residual = {}, .relu = true});
  });

  t.add("dropout with p 1.5", Expect::Error, {"dropout", "1.5"}, [] { (void)dropout(f32({2}), 1.5); });
  t.add("dropout with p -0.1", Expect::Error, {"dropout", "-0.1"}, [] { (void)dropout(f32({2}), -0.1); });
  t.add("dropout with NaN p", Expect::Error, {"dropout", "nan"}, [] { (void)dropout(f32({2}), kNaN); });
  t.add("dropout of an int tensor", Expect::DType, {"dropout", "int64"}, [] { (void)dropout(i64({2}), 0.5); });
  t.add("dropout of undefined", Expect::Error, {"dropout", "undefined"}, [] { (void)dropout(Tensor(), 0.5); });
  t.add("dropout with a cuda generator", Expect::Device, {"dropout", "cuda:0"},
        [] { (void)dropout(f32({2}), 0.5, true, Generator(1, Device::cuda(0))); });

  t.add("embedding of a 1-d weight", Expect::Shape, {"embedding", "[4]"}, [] { (void)embedding(f32({4}), i64({1})); });
  t.add("embedding of a 0-d weight", Expect::Shape, {"embedding", "[]"}, [] { (void)embedding(scalar0(), i64({1})); });
  t.add("embedding with float indices", Expect::DType, {"embedding", "float32"}, [] {
    (void)embedding(f32({4, 2}), f32({1}));
  });
  t.add("embedding past the end", Expect::Index, {"embedding", "10"}, [] {
    (void)embedding(f32({4, 2}), tensor({int64_t{10}}));
  });
  t.add("embedding of a negative index", Expect::Index, {"embedding", "-1"}, [] {
    (void)embedding(f32({4, 2}), tensor({int64_t{-1}}));
  });
  t.add("embedding of an int32 index past the end", Expect::Index, {"embedding", "4"}, [] {
    (void)embedding(f32({4, 2}), tensor({int64_t{4}}).to(DType::Int32));
  });
  t.add("embedding past the end with embedding_dim 0", Expect::Index, {"embedding", "-5", "[3, 0]"}, [] {
    (void)embedding(f32({3, 0}), tensor({int64_t{1}, int64_t{-5}}));
  });
  t.add("embedding of undefined indices", Expect::Error, {"embedding", "indices", "undefined"}, [] {
    (void)embedding(f32({4, 2}), Tensor());
  });
  t.add("embedding across devices", Expect::Device, {"embedding", "cpu", "cuda:0"}, [] {
    (void)embedding(f32({4, 2}), fake_cuda({1}, DType::Int64));
  });

  // A float target holds class probabilities: of the logits' shape, or refused naming both.
  t.add("cross_entropy with float targets of the indices' shape", Expect::Shape,
        {"cross_entropy", "float32", "[2]", "[2, 3]"}, [] {
          (void)cross_entropy(f32({2, 3}), f32({2}));
        });
  t.add("cross_entropy with a bool target", Expect::DType, {"cross_entropy", "bool"}, [] {
    (void)cross_entropy(f32({2, 3}), zeros({2}, DType::Bool));
  });
  t.add("cross_entropy with a class weight of another length", Expect::Shape, {"cross_entropy", "weight", "[4]"}, [] {
    (void)cross_entropy(f32({2, 3}), i64({2}), Reduction::Mean, -100, 0.0, f32({4}));
  });
  t.add("binary_cross_entropy of an input above 1", Expect::Error, {"binary_cross_entropy", "[0, 1]", "2"},
        [] { (void)binary_cross_entropy(full({2}, 2.0), zeros({2})); });
  t.add("kl_div of targets of another shape", Expect::Shape, {"kl_div", "[2, 3]", "[3]"}, [] {
    (void)kl_div(f32({2, 3}), f32({3}));
  });
  t.add("max_pool1d of a 4-d input", Expect::Shape, {"max_pool1d", "[1, 2, 3, 4]"}, [] {
    (void)max_pool1d(f32({1, 2, 3, 4}), 2);
  });
  t.add("avg_pool1d with a window longer than the input", Expect::Shape,
        {"avg_pool1d", "output length", "not positive", "[1, 2, 3]"}, [] {
          (void)avg_pool1d(f32({1, 2, 3}), 5);
        });
  t.add("cross_entropy of int logits", Expect::DType, {"cross_entropy", "logits", "int64"}, [] {
    (void)cross_entropy(i64({2, 3}), i64({2}));
  });
  t.add("cross_entropy of 0-d logits", Expect::Shape, {"cross_entropy", "0-d"},
        [] { (void)cross_entropy(scalar0(), i64({})); });
  t.add("cross_entropy: target shape mismatch", Expect::Shape, {"cross_entropy", "[3]", "[2, 3]"}, [] {
    (void)cross_entropy(f32({2, 3}), i64({3}));
  });
  t.add("cross_entropy: target past the classes", Expect::Index, {"cross_entropy", "5"}, [] {
    (void)cross_entropy(f32({2, 3}), tensor({int64_t{0}, int64_t{5}}));
  });
  t.add("cross_entropy: negative target", Expect::Index, {"cross_entropy", "-3"}, [] {
    (void)cross_entropy(f32({2, 3}), tensor({int64_t{0}, int64_t{-3}}));
  });
  t.add("cross_entropy: label_smoothing 1.5", Expect::Error, {"cross_entropy", "label_smoothing", "1.5"}, [] {
    (void)cross_entropy(f32({2, 3}), i64({2}), Reduction::Mean, -100, 1.5);
  });
  t.add("cross_entropy: NaN label_smoothing", Expect::Error, {"cross_entropy", "label_smoothing", "nan"}, [] {
    (void)cross_entropy(f32({2, 3}), i64({2}), Reduction::Mean, -100, kNaN);
  });
  t.add("cross_entropy: no classes", Expect::Shape, {"cross_entropy", "[2, 0]"}, [] {
    (void)cross_entropy(f32({2, 0}), i64({2}));
  });
  t.add("cross_entropy of undefined target", Expect::Error, {"cross_entropy", "target", "undefined"}, [] {
    (void)cross_entropy(f32({2, 3}), Tensor());
  });
  t.add("cross_entropy across devices", Expect::Device, {"cross_entropy", "cpu", "cuda:0"}, [] {
    (void)cross_entropy(f32({2, 3}), fake_cuda({2}, DType::Int64));
  });
  t.add("cross_entropy with an unknown reduction", Expect::Error, {"cross_entropy", "reduction", "7"}, [] {
    (void)cross_entropy(f32({2, 3}), i64({2}), static_cast<Reduction>(7));
  });

  t.add("mse_loss: shapes differ", Expect::Shape, {"mse_loss", "[2, 1]", "[2]"}, [] {
    (void)mse_loss(f32({2, 1}), f32({2}));
  });
  t.add("mse_loss of an int input", Expect::DType, {"mse_loss", "int64"}, [] { (void)mse_loss(i64({2}), f32({2})); });
  t.add("mse_loss of an int target", Expect::DType, {"mse_loss", "target", "int64"},
        [] { (void)mse_loss(f32({2}), i64({2})); });
  t.add("mse_loss of undefined", Expect::Error, {"mse_loss", "undefined"}, [] { (void)mse_loss(f32({2}), Tensor()); });
  t.add("mse_loss across devices", Expect::Device, {"mse_loss", "cpu", "cuda:0"},
        [] { (void)mse_loss(f32({2}), fake_cuda({2})); });
  t.add("mse_loss with an unknown reduction", Expect::Error, {"mse_loss", "reduction", "9"},
        [] { (void)mse_loss(f32({2}), f32({2}), static_cast<Reduction>(9)); });

  const auto sdpa = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    (void)scaled_dot_product_attention(q, k, v);
  };
  t.add("attention of a 1-d query", Expect::Shape, {"scaled_dot_product_attention", "2 dims"}, [=] {
    sdpa(f32({4}), f32({2, 4}), f32({2, 4}));
  });
  t.add("attention: dtypes differ", Expect::DType, {"scaled_dot_product_attention", "float64"}, [=] {
    sdpa(f32({2, 4}), f64({2, 4}), f32({2, 4}));
  });
  t.add("attention: embedding dims differ", Expect::Shape, {"scaled_dot_product_attention", "4 vs 3"}, [=] {
    sdpa(f32({2, 4}), f32({2, 3}), f32({2, 3}));
  });
  t.add("attention: key and value lengths differ", Expect::Shape, {"scaled_dot_product_attention", "2 vs 3"}, [=] {
    sdpa(f32({2, 4}), f32({2, 4}), f32({3, 4}));
  });
  t.add("attention of int inputs", Expect::DType, {"scaled_dot_product_attention", "int64"}, [=] {
    sdpa(i64({2, 4}), i64({2, 4}), i64({2, 4}));
  });
  t.add("attention of an undefined key", Expect::Error, {"scaled_dot_product_attention", "key", "undefined"}, [=] {
    sdpa(f32({2, 4}), Tensor(), f32({2, 4}));
  });
  t.add("attention across devices", Expect::Device, {"scaled_dot_product_attention", "cpu", "cuda:0"}, [=] {
    sdpa(f32({2, 4}), f32({2, 4}), fake_cuda({2, 4}));
  });
  t.add("attention: batch dims do not broadcast", Expect::Shape, {"scaled_dot_product_attention", "[3]"}, [=] {
    sdpa(f32({2, 2, 4}), f32({3, 2, 4}), f32({3, 2, 4}));
  });
  t.add("attention: int mask", Expect::DType, {"scaled_dot_product_attention", "attn_mask", "int64"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), i64({2, 2}));
  });
  t.add("attention: mask does not broadcast", Expect::Shape, {"scaled_dot_product_attention", "attn_mask", "[3, 3]"},
        [] {
          (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), zeros({3, 3}, DType::Bool));
        });
  t.add("attention with dropout_p 1", Expect::Error, {"scaled_dot_product_attention", "dropout_p"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), Tensor(), 1.0);
  });
  t.add("attention with NaN dropout_p", Expect::Error, {"scaled_dot_product_attention", "dropout_p", "nan"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), Tensor(), kNaN);
  });
  t.add("attention with a mask and is_causal", Expect::Error, {"scaled_dot_product_attention", "is_causal"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), zeros({2, 2}, DType::Bool), 0.0, true);
  });
  t.add("attention with a NaN scale", Expect::Error, {"scaled_dot_product_attention", "scale", "nan"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), Tensor(), 0.0, false, kNaN);
  });
  t.add("attention with an infinite scale", Expect::Error, {"scaled_dot_product_attention", "scale", "inf"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), Tensor(), 0.0, false, kInf);
  });
  t.add("attention with a cuda generator", Expect::Device, {"scaled_dot_product_attention", "cuda:0"}, [] {
    (void)scaled_dot_product_attention(f32({2, 4}), f32({2, 4}), f32({2, 4}), Tensor(), 0.5, false, std::nullopt,
                                       Generator(1, Device::cuda(0)));
  });

  t.add("topk: k past the size", Expect::Index, {"topk", "k = 5", "size 3"}, [] { (void)topk(f32({3}), 5); });
  t.add("topk: negative k", Expect::Index, {"topk", "-1"}, [] { (void)topk(f32({3}), -1); });
  t.add("topk: dim out of range", Expect::Index, {"topk", "2"}, [] { (void)topk(f32({3}), 1, 2); });
  t.add("topk of a bool tensor", Expect::DType, {"topk", "bool"}, [] { (void)topk(zeros({3}, DType::Bool), 1); });
  t.add("topk of undefined", Expect::Error, {"topk", "undefined"}, [] { (void)topk(Tensor(), 1); });
  t.add("topk(k 2) of a 0-d tensor", Expect::Index, {"topk", "k = 2"}, [] { (void)topk(scalar0(), 2); });
  t.add("topk(dim 1) of a 0-d tensor", Expect::Index, {"topk", "1"}, [] { (void)topk(scalar0(), 1, 1); });
  t.add("tril of a 1-d tensor", Expect::Shape, {"tril", "[3]"}, [] { (void)tril(f32({3})); });
  t.add("triu of a 0-d tensor", Expect::Shape, {"triu", "[]"}, [] { (void)triu(scalar0()); });
  t.add("tril of undefined", Expect::Error, {"tril", "undefined"}, [] { (void)tril(Tensor()); });
}

// --- core/ops/foreach.h --------------------------------------------------------------------------------

void foreach_rows(Table& t) {
  const auto sgd = [](TensorList p, TensorList g, TensorList b, Tensor lr, double momentum = 0.0, double wd = 0.0,
                      double dampening = 0.0) {
    foreach_sgd_(p, g, b, lr, momentum, dampening, false, wd, {f32_scalar(0)});
  };
  t.add("foreach_sgd_: fewer gradients", Expect::Error, {"foreach_sgd_", "gradients", "got 1"}, [=] {
    sgd({f32({2}), f32({2})}, {f32({2})}, {}, f32_scalar(0.1f));
  });
  t.add("foreach_sgd_: strided parameter", Expect::Error, {"foreach_sgd_", "parameter 0", "not dense"},
        [=] { sgd({f32({4}).slice(0, 0, 4, 2)}, {f32({2})}, {}, f32_scalar(0.1f)); });
  t.add("foreach_sgd_: int parameter", Expect::DType, {"foreach_sgd_", "parameter 0", "int64"},
        [=] { sgd({i64({2})}, {i64({2})}, {}, f32_scalar(0.1f)); });
  t.add("foreach_sgd_: gradient dtype differs", Expect::DType, {"foreach_sgd_", "gradient 0", "float64"},
        [=] { sgd({f32({2})}, {f64({2})}, {}, f32_scalar(0.1f)); });
  t.add("foreach_sgd_: gradient shape differs", Expect::Shape, {"foreach_sgd_", "gradient 0", "[3]"},
        [=] { sgd({f32({2})}, {f32({3})}, {}, f32_scalar(0.1f)); });
  t.add("foreach_sgd_: no momentum buffers", Expect::Error, {"foreach_sgd_", "momentum buffers"},
        [=] { sgd({f32({2})}, {f32({2})}, {}, f32_scalar(0.1f), 0.9); });
  t.add("foreach_sgd_: undefined lr", Expect::Error, {"foreach_sgd_", "lr", "undefined"},
        [=] { sgd({f32({2})}, {f32({2})}, {}, Tensor()); });
  t.add("foreach_sgd_: int64 lr", Expect::DType, {"foreach_sgd_", "lr", "int64"},
        [=] { sgd({f32({2})}, {f32({2})}, {}, zeros({}, DType::Int64)); });
  t.add("foreach_sgd_: two-element lr", Expect::DType, {"foreach_sgd_", "lr", "[2]"},
        [=] { sgd({f32({2})}, {f32({2})}, {}, f32({2})); });
  t.add("foreach_sgd_: lr on another device", Expect::Device, {"foreach_sgd_", "lr", "cuda:0"},
        [=] { sgd({f32({2})}, {f32({2})}, {}, fake_cuda({})); });
  t.add("foreach_sgd_: undefined parameter", Expect::Error, {"foreach_sgd_", "parameter 0", "undefined"},
        [=] { sgd({Tensor()}, {f32({2})}, {}, f32_scalar(0.1f)); });
  t.add("foreach_sgd_: undefined gradient", Expect::Error, {"foreach_sgd_", "gradient 0", "undefined"},
        [=] { sgd({f32({2})}, {Tensor()}, {}, f32_scalar(0.1f)); });
  t.add("foreach_sgd_: parameters on two devices", Expect::Device, {"foreach_sgd_", "cpu", "cuda:0"}, [=] {
    sgd({f32({2}), fake_cuda({2})}, {f32({2}), fake_cuda({2})}, {}, f32_scalar(0.1f));
  });
  t.add("foreach_sgd_: NaN weight_decay", Expect::Error, {"foreach_sgd_", "weight_decay", "nan"},
        [=] { sgd({f32({2})}, {f32({2})}, {}, f32_scalar(0.1f), 0.0, kNaN); });
  t.add("foreach_sgd_: negative momentum", Expect::Error, {"foreach_sgd_", "momentum", "-0.5"},
        [=] { sgd({f32({2})}, {f32({2})}, {f32({2})}, f32_scalar(0.1f), -0.5); });
  t.add("foreach_sgd_: infinite dampening", Expect::Error, {"foreach_sgd_", "dampening", "inf"},
        [=] { sgd({f32({2})}, {f32({2})}, {f32({2})}, f32_scalar(0.1f), 0.9, 0.0, kInf); });
  const auto adamw = [](TensorList m, TensorList v, double b1, double b2, double eps, double wd = 0.0) {
    foreach_adamw_({f32({2})}, {f32({2})}, m, v, f32_scalar(0.1f), {f32_scalar(0)}, b1, b2, eps, wd);
  };
  t.add("foreach_adamw_: no exp_avg", Expect::Error, {"foreach_adamw_", "exp_avg"},
        [=] { adamw({}, {f32({2})}, 0.9, 0.999, 1e-8); });
  t.add("foreach_adamw_: int exp_avg_sq", Expect::DType, {"foreach_adamw_", "exp_avg_sq 0", "int64"},
        [=] { adamw({f32({2})}, {i64({2})}, 0.9, 0.999, 1e-8); });
  t.add("foreach_adamw_: beta1 1.5", Expect::Error, {"foreach_adamw_", "beta1", "1.5"},
        [=] { adamw({f32({2})}, {f32({2})}, 1.5, 0.999, 1e-8); });
  t.add("foreach_adamw_: NaN beta2", Expect::Error, {"foreach_adamw_", "beta2", "nan"},
        [=] { adamw({f32({2})}, {f32({2})}, 0.9, kNaN, 1e-8); });
  t.add("foreach_adamw_: negative eps", Expect::Error, {"foreach_adamw_", "eps", "-1"},
        [=] { adamw({f32({2})}, {f32({2})}, 0.9, 0.999, -1.0); });
  t.add("foreach_adamw_: infinite weight_decay", Expect::Error, {"foreach_adamw_", "weight_decay", "inf"},
        [=] { adamw({f32({2})}, {f32({2})}, 0.9, 0.999, 1e-8, kInf); });
  t.add("foreach_adamw_: both moments in one tensor", Expect::Error,
        {"foreach_adamw_", "exp_avg 0", "exp_avg_sq 0", "share memory"}, [=] {
          const Tensor moments = f32({2});
          adamw({moments}, {moments}, 0.9, 0.999, 1e-8);
        });
  const auto adam = [](TensorList vmax, bool amsgrad) {
    AdamHyper o;
    o.amsgrad = amsgrad;
    foreach_adam_({f32({2})}, {f32({2})}, {f32({2})}, {f32({2})}, vmax, f32_scalar(0.1f), {f32_scalar(0)}, o);
  };
  t.add("foreach_adam_: amsgrad without max_exp_avg_sq", Expect::Error,
        {"foreach_adam_", "expected 1 max_exp_avg_sq", "got 0"}, [=] { adam({}, true); });
  t.add("foreach_adam_: max_exp_avg_sq without amsgrad", Expect::Error,
        {"foreach_adam_", "max_exp_avg_sq", "without amsgrad"}, [=] { adam({f32({2})}, false); });
  t.add("foreach_adam_: max_exp_avg_sq of another shape", Expect::Shape, {"foreach_adam_", "max_exp_avg_sq 0", "[3]"},
        [=] { adam({f32({3})}, true); });
  t.add("foreach_adam_: undefined max_exp_avg_sq", Expect::Error, {"foreach_adam_", "max_exp_avg_sq 0", "undefined"},
        [=] { adam({Tensor()}, true); });
  t.add("foreach_adam_: max_exp_avg_sq on another device", Expect::Device, {"foreach_adam_", "cpu", "cuda:0"},
        [=] { adam({fake_cuda({2})}, true); });
  t.add("foreach_adam_: max_exp_avg_sq in the exp_avg_sq's memory", Expect::Error,
        {"foreach_adam_", "max_exp_avg_sq 0", "exp_avg_sq 0", "share memory"}, [=] {
          AdamHyper o;
          o.amsgrad = true;
          const Tensor v = f32({2});
          foreach_adam_({f32({2})}, {f32({2})}, {f32({2})}, {v}, {v}, f32_scalar(0.1f), {f32_scalar(0)}, o);
        });
  t.add("foreach_sgd_: a parameter as its own gradient", Expect::Error,
        {"foreach_sgd_", "parameter 0", "gradient 0", "share memory"}, [=] {
          const Tensor w = f32({2});
          sgd({w}, {w}, {}, f32_scalar(0.1f));
        });
  t.add("foreach_norm with norm_type 0", Expect::Error, {"foreach_norm", "norm_type"},
        [] { (void)foreach_norm({f32({2})}, 0.0); });
  t.add("foreach_norm with NaN norm_type", Expect::Error, {"foreach_norm", "nan"},
        [] { (void)foreach_norm({f32({2})}, kNaN); });
  t.add("foreach_norm of an int tensor", Expect::DType, {"foreach_norm", "int64"},
        [] { (void)foreach_norm({i64({2})}); });
  t.add("foreach_norm of undefined", Expect::Error, {"foreach_norm", "tensor 0", "undefined"},
        [] { (void)foreach_norm({Tensor()}); });
  t.add("foreach_norm of a strided tensor", Expect::Error, {"foreach_norm", "not dense"},
        [] { (void)foreach_norm({f32({4}).slice(0, 0, 4, 2)}); });
  t.add("foreach_mul_ by an int scalar", Expect::DType, {"foreach_mul_", "scalar", "int64"},
        [] { foreach_mul_({f32({2})}, zeros({}, DType::Int64)); });
  t.add("foreach_mul_ by an undefined scalar", Expect::Error, {"foreach_mul_", "scalar", "undefined"},
        [] { foreach_mul_({f32({2})}, Tensor()); });
  t.add("foreach_mul_ by two elements", Expect::DType, {"foreach_mul_", "[2]"},
        [] { foreach_mul_({f32({2})}, f32({2})); });
  t.add("foreach_add_scalar_ of an int tensor", Expect::DType, {"foreach_add_scalar_", "int64"},
        [] { foreach_add_scalar_({i64({2})}, 1.0); });
  t.add("foreach_add_scalar_ with an int64 found_inf", Expect::DType, {"foreach_add_scalar_", "found_inf"},
        [] { foreach_add_scalar_({f32({2})}, 1.0, zeros({}, DType::Int64)); });
  t.add("foreach_zero_ of undefined", Expect::Error, {"foreach_zero_", "tensor 1", "undefined"}, [] {
    foreach_zero_({f32({2}), Tensor()});
  });
  t.add("foreach_zero_ of a strided tensor", Expect::Error, {"foreach_zero_", "not dense"},
        [] { foreach_zero_({f32({4}).slice(0, 0, 4, 2)}); });
}

// --- core/autograd.h and core/gradcheck.h --------------------------------------------------------------

void autograd_rows(Table& t) {
  t.add("backward of a tensor without grad", Expect::Autograd, {"backward", "does not require grad"},
        [] { f32({1}).backward(); });
  t.add("backward of a non-scalar without a gradient", Expect::Autograd, {"backward", "one-element", "[3]"},
        [] { sum(leaf({3}), {}, true).expand({3}).backward(); });
  t.add("backward with a gradient of the wrong shape", Expect::Shape, {"backward", "[2]", "[3]"},
        [] { (leaf({3}) * 2.0).backward(f32({2})); });
  t.add("backward twice", Expect::Autograd, {"second time"}, [] {
    Tensor x = leaf({2});
    Tensor y = sum(x * x);
    y.backward();
    y.backward();
  });
  t.add("backward after an in-place change of a saved tensor", Expect::Autograd, {"modified", "in-place"}, [] {
    Tensor x = leaf({2});
    Tensor h = x * 1.0;
    Tensor y = sum(h * h);
    h.mul_(2.0);
    y.backward();
  });
  t.add("backward of undefined", Expect::Error, {"backward", "undefined"}, [] { Tensor().backward(); });
  t.add("grad of an input that does not require grad", Expect::Autograd, {"grad", "input 0"}, [] {
    Tensor x = leaf({2});
    (void)grad({sum(x * 2.0)}, {f32({2})});
  });
  t.add("set_requires_grad on an int tensor", Expect::DType, {"set_requires_grad", "int64"},
        [] { i64({2}).set_requires_grad(true); });
  t.add("set_requires_grad on a non-leaf", Expect::Autograd, {"set_requires_grad", "leaf"},
        [] { (leaf({2}) * 2.0).set_requires_grad(false); });
  t.add("set_requires_grad on undefined", Expect::Error, {"set_requires_grad", "undefined"},
        [] { Tensor().set_requires_grad(true); });
  t.add("set_grad of the wrong shape", Expect::Shape, {"set_grad", "[3]", "[2]"}, [] { leaf({2}).set_grad(f32({3})); });
  t.add("set_grad of the wrong dtype", Expect::Shape, {"set_grad", "float64"}, [] { leaf({2}).set_grad(f64({2})); });
  t.add("grad of undefined", Expect::Error, {"grad", "undefined"}, [] { (void)Tensor().grad(); });
  t.add("detach of undefined", Expect::Error, {"detach", "undefined"}, [] { (void)Tensor().detach(); });
  t.add("register_hook without grad", Expect::Autograd, {"register_hook"},
        [] { f32({2}).register_hook([](const Tensor& g) { return g; }); });
  t.add("retain_grad without grad", Expect::Autograd, {"retain_grad"}, [] { f32({2}).retain_grad(); });
  t.add("post-accumulate hook on a non-leaf", Expect::Autograd, {"register_post_accumulate_grad_hook"},
        [] { (leaf({2}) * 2.0).register_post_accumulate_grad_hook([](Tensor&) {}); });
  t.add("queue_backward_callback outside backward", Expect::Autograd, {"queue_backward_callback"},
        [] { queue_backward_callback([] {}); });
  t.add("queue_outer_backward_callback outside backward", Expect::Autograd, {"queue_outer_backward_callback"},
        [] { queue_outer_backward_callback([] {}); });
  t.add("set_data of undefined", Expect::Error, {"set_data", "undefined"}, [] { f32({2}).set_data(Tensor()); });
  t.add("set_data on a non-leaf", Expect::Autograd, {"set_data", "leaf"}, [] { (leaf({2}) * 2.0).set_data(f32({2})); });
  t.add("set_data of int data into a grad leaf", Expect::DType, {"set_data", "int64"},
        [] { leaf({2}).set_data(i64({2})); });
  t.add("gradcheck of a float32 input", Expect::DType, {"gradcheck", "input 0", "float32"},
        [] { (void)gradcheck([](const TensorList& in) { return TensorList{in[0] * 2.0}; }, {leaf({2})}); });
}

}  // namespace

TEST_CASE("bad-input sweep: core", "[bad_input]") {
  Table table;
  tensor_rows(table);
  factory_rows(table);
  generator_rows(table);
  view_rows(table);
  shape_rows(table);
  elementwise_rows(table);
  reduce_rows(table);
  index_rows(table);
  matmul_conv_pool_rows(table);
  nn_op_rows(table);
  foreach_rows(table);
  autograd_rows(table);
  bad_input::run_table(table, 500);
}

// The fixes must not refuse what is valid: extreme but legal arguments, and 0-d tensors where
// PyTorch takes dim 0 / -1 as "the whole tensor".
TEST_CASE("bad-input sweep: extreme but valid calls still work", "[bad_input]") {
  Tensor x = arange(0, 5).to(DType::Float32);
  CHECK(x.slice(0, 0, kMax, kMax).to_vector<float>() == std::vector<float>{0.0f});
  CHECK(x.slice(0, 1, kMax, 3).to_vector<float>() == std::vector<float>{1.0f, 4.0f});
  CHECK(x.slice(0, kMin, kMax).numel() == 5);
  CHECK(zeros({3, 2}).slice(0, 0, 3, kMax).sizes() == Shape{1, 2});
  CHECK(x.narrow(0, 5, 0).numel() == 0);
  CHECK(chunk(x, kMax).size() == 5);
  // An empty dim gives `chunks` empty pieces, as PyTorch (one before: `q, k, v` unpacked past it).
  const TensorList empty_rows = chunk(zeros({0, 12}), 3, 0), empty_cols = chunk(zeros({4, 0}), 3, 1);
  REQUIRE(empty_rows.size() == 3);
  REQUIRE(empty_cols.size() == 3);
  for (const Tensor& p : empty_rows) CHECK(p.sizes() == Shape{0, 12});
  for (const Tensor& p : empty_cols) CHECK(p.sizes() == Shape{4, 0});
  CHECK_THROWS_WITH(chunk(zeros({0}), kMax), Catch::Contains("chunk") && Catch::Contains("empty dim"));
  // Empty tensors with huge dims: flatten's product is checked (2^80 wrapped to 0), and views of them
  // keep a sane offset (select and narrow multiplied a never-used huge stride: offset -2).
  const Tensor huge_empty = zeros({0, int64_t{1} << 40, int64_t{1} << 40});
  CHECK_THROWS_WITH(huge_empty.flatten(1), Catch::Contains("flatten"));
  const Tensor wide_empty = zeros({3, 0, int64_t{1} << 62, 4});
  CHECK(wide_empty.select(0, 2).storage_offset() >= 0);
  CHECK(wide_empty.narrow(0, 2, 1).storage_offset() >= 0);
  CHECK(split(x, kMax).size() == 1);
  CHECK(x.narrow(0, -5, 5).numel() == 5);
  CHECK(zeros({0, kMax}).numel() == 0);
  CHECK(broadcast_of({kMax}).numel() == kMax);
  CHECK(f32({4}).as_strided({2}, {3}, 0).sizes() == Shape{2});
  Tensor s = scalar_tensor(3.0);
  CHECK(sum(s, {0}).item<double>() == 3.0);
  CHECK(sum(s, {-1}, true).dim() == 0);
  CHECK(max(s, 0).first.item<double>() == 3.0);
  CHECK(s.transpose(0, -1).dim() == 0);
  CHECK(s.squeeze(0).dim() == 0);
  CHECK(s.flatten(0).sizes() == Shape{1});
  CHECK(gather(s, 0, zeros({}, DType::Int64)).item<double>() == 3.0);
  CHECK(softmax(s, 0).item<double>() == 1.0);
  CHECK(topk(s, 1, 0).first.item<double>() == 3.0);
  CHECK(topk(s, 1, -1).second.item<int64_t>() == 0);
  CHECK(randint(0, 2, {4}, DType::Bool).numel() == 4);
  CHECK(randint(0, 256, {4}, DType::UInt8).numel() == 4);
}

TEST_CASE("messages quote a refused number as it was passed", "[bad_input]") {
  // The fewest digits that read back as the same number: never six decimals' rounding to 0.
  CHECK(num_str(0.1) == "0.1");
  CHECK(num_str(1e-40) == "1e-40");
  CHECK(num_str(-1e-9) == "-1e-09");
  CHECK(num_str(1.0000001) == "1.0000001");
  CHECK(num_str(2.0) == "2");
  CHECK(num_str(-0.0) == "-0");
  CHECK(num_str(1e16) == "1e+16");
  CHECK(num_str(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(num_str(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(num_str(-std::numeric_limits<double>::quiet_NaN()) == "nan");
  // A float in a float's digits: 0.3f is not 0.30000001192092896.
  CHECK(num_str(0.3F) == "0.3");
  CHECK(num_str(std::numeric_limits<float>::denorm_min()) == "1e-45");
}
