// Op table rows of the reduce family: sum, mean, var, std, var_mean, prod, max/min, amax/amin,
// argmax/argmin, any/all, logsumexp, logaddexp, logaddexp2.
// Each dims/keepdim variant is its own row, since a row's op has fixed arguments. Inputs of max and
// min come from rnd_distinct so the winners are unique (no ties for the index outputs or the
// gradient). multinomial is random and tested on its own.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

using Group = std::vector<double>;
using GroupFn = std::function<double(const Group&)>;

double sum_of(const Group& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double mean_of(const Group& v) { return sum_of(v) / static_cast<double>(v.size()); }  // 0/0 = NaN when empty
GroupFn var_with(double correction) {
  return [correction](const Group& v) {
    double m = mean_of(v), ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    double dof = static_cast<double>(v.size()) - correction;
    return ss / std::max(0.0, dof);
  };
}
// log(sum(exp(v))) in long double around the max (-inf for an empty group).
double logsumexp_of(const Group& v) {
  if (v.empty()) return -std::numeric_limits<double>::infinity();
  const double m = *std::max_element(v.begin(), v.end());
  if (std::isinf(m)) return m;
  long double s = 0;
  for (double x : v) s += std::exp(static_cast<long double>(x - m));
  return m + static_cast<double>(std::log(s));
}
double prod_of(const Group& v) { return std::accumulate(v.begin(), v.end(), 1.0, std::multiplies<double>()); }
double max_of(const Group& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const Group& v) { return *std::min_element(v.begin(), v.end()); }
// Position of the first maximum / minimum in the group (row-major order along the reduced dims).
double argmax_of(const Group& v) { return static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin()); }
double argmin_of(const Group& v) { return static_cast<double>(std::min_element(v.begin(), v.end()) - v.begin()); }
double any_of(const Group& v) { return std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1 : 0; }
double all_of(const Group& v) { return std::all_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1 : 0; }

DType sum_dtype(DType t) { return is_floating(t) ? t : DType::Int64; }

// The usual inputs of a reduction over a 3-d tensor: odd sizes, a non-contiguous one and a permuted one.
std::vector<Sample> normal_samples(uint64_t seed) {
  return {
      {"3x5x7", [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed)}; }},
      {"non-contiguous 5x3x9",
       [seed](DType t, Device d) { return TensorList{noncontig(rnd({5, 3, 9}, t, d, seed + 1))}; }},
      {"permuted 7x3x5",
       [seed](DType t, Device d) { return TensorList{rnd({5, 7, 3}, t, d, seed + 2).permute({1, 2, 0})}; }},
  };
}

// A row whose single output is ref_reduce(x, dims, keepdim, fn).
OpRow reduction(const std::string& name, std::vector<DType> dtypes, std::vector<Sample> samples,
                std::function<Tensor(const Tensor&)> op, Shape dims, bool keepdim, GroupFn fn) {
  OpRow r;
  r.name = name;
  r.dtypes = std::move(dtypes);
  r.samples = std::move(samples);
  r.op = [op](const TensorList& x) { return TensorList{op(x[0])}; };
  r.reference = [dims, keepdim, fn](const TensorList& x) { return TensorList{ref_reduce(x[0], dims, keepdim, fn)}; };
  return r;
}

// Why the long-chunked rows also get an absolute floor on CUDA (atol 1e-3).
const char* const kWhyLongSum =
    "70001-term float sums carry a rounding error of about sqrt(log2 n) * eps * ||x||_2 ~ 6e-5 absolute on the "
    "GPU's float tree, whatever the size of the result, so a sum that lands near zero needs an absolute allowance "
    "(atol 1e-3) that the relative one cannot give";

// The memory-bound bench of a float sum of n elements (--elements) in float32 and bfloat16: over
// all of them, or over the rows of [n/1024, 1024]. Each element read once, each result written once.
BenchCase row_sum_bench(const std::string& name, bool rows) {
  BenchCase b;
  b.name = name;
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = "sum";
  b.args = rows ? R"({"dim": [1]})" : "{}";
  b.setup = [rows](DType t, int64_t n) {
    BenchSetup s;
    const double es = static_cast<double>(element_size(t));
    if (rows) {
      s.shape = {n / 1024, 1024};
      s.bytes = es * static_cast<double>(n + n / 1024);
    } else {
      s.shape = {n};
      s.bytes = es * static_cast<double>(n) + es;
    }
    s.inputs = {{s.shape, t}};
    return s;
  };
  return b;
}

// Bool-like inputs (0/1 values cast to the dtype) with rows that are all false, all true and mixed.
std::vector<Sample> logical_samples(uint64_t seed) {
  return {
      {"4x3 crafted rows",
       [](DType t, Device d) {
         return TensorList{from_values({0, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1}, {4, 3}).to(t).to(d)};
       }},
      {"all false 3x5", [](DType t, Device d) { return TensorList{zeros({3, 5}, TensorOptions(t, d))}; }},
      {"all true non-contiguous 3x5",
       [](DType t, Device d) { return TensorList{noncontig(ones({3, 5}, TensorOptions(t, d)))}; }},
      {"random 3x5x7", [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, DType::Bool, d, seed).to(t)}; }},
  };
}

}  // namespace

void add_reduce_rows(std::vector<OpRow>& rows) {
  // --- sum ---------------------------------------------------------------------------------
  {
    std::vector<Sample> s = normal_samples(100);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 104)}; }});
    s.push_back({"empty 0x3", [](DType t, Device d) { return TensorList{zeros({0, 3}, TensorOptions(t, d))}; }});
    OpRow r = reduction("sum_all", kAllNumeric, s, [](const Tensor& x) { return sum(x); }, {}, false, sum_of);
    r.differentiable = {0};
    r.out_dtype = sum_dtype;
    r.errors = {
        {"dim out of range", [] { sum(zeros({2, 3}), {5}); }, {"sum", "dimension 5", "2-d"}},
        {"negative dim out of range", [] { sum(zeros({2, 3}), {-3}); }, {"sum", "dimension -3", "2-d"}},
        {"dim repeated", [] { sum(zeros({2, 3}), {1, -1}); }, {"sum", "[1, -1]"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.bench = {row_sum_bench("sum", false)};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("sum_dim1", kAllNumeric, normal_samples(110), [](const Tensor& x) { return sum(x, {1}); }, {1},
                        false, sum_of);
    r.differentiable = {0};
    r.out_dtype = sum_dtype;
    r.errors = {{"dim out of range", [] { sum(zeros({2, 3}), {2}); }, {"sum", "dimension 2", "2-d"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.bench = {row_sum_bench("sum_rows", true)};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("sum_dim1_keepdim", kAllNumeric, normal_samples(120),
                        [](const Tensor& x) { return sum(x, {1}, true); }, {1}, true, sum_of);
    r.differentiable = {0};
    r.out_dtype = sum_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("sum_dims02", kAllNumeric, normal_samples(130), [](const Tensor& x) { return sum(x, {0, 2}); },
                        {0, 2}, false, sum_of);
    r.differentiable = {0};
    r.out_dtype = sum_dtype;
    r.errors = {{"one of the dims out of range", [] { sum(zeros({2, 3, 4}), {0, 3}); }, {"sum", "dimension 3", "3-d"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("sum_dimneg1_keepdim", kAllNumeric, normal_samples(140),
                        [](const Tensor& x) { return sum(x, {-1}, true); }, {-1}, true, sum_of);
    r.differentiable = {0};
    r.out_dtype = sum_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    // Integer and bool inputs sum to int64.
    std::vector<Sample> s = normal_samples(150);
    OpRow r = reduction("sum_int_bool_dims01", {DType::Int32, DType::UInt8, DType::Bool, DType::Int64}, s,
                        [](const Tensor& x) { return sum(x, {0, 1}); }, {0, 1}, false, sum_of);
    r.out_dtype = [](DType) { return DType::Int64; };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    // Long reductions with few outputs take the chunked path (partials of 32768 merged in order).
    // Forward only: a gradcheck over 140k elements would take minutes.
    std::vector<Sample> s = {
        {"2x70001", [](DType t, Device d) { return TensorList{rnd({2, 70001}, t, d, 160)}; }},
        {"non-contiguous 70001x2 over dim 0",
         [](DType t, Device d) { return TensorList{rnd({2, 70001}, t, d, 161).t()}; }},
    };
    OpRow r;
    r.name = "sum_long_chunked";
    r.dtypes = kAllNumeric;
    r.samples = s;
    r.op = [](const TensorList& x) { return TensorList{sum(x[0], {x[0].size(0) == 2 ? 1 : 0})}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(x[0], {x[0].size(0) == 2 ? 1 : 0}, false, sum_of)};
    };
    r.out_dtype = sum_dtype;
    r.cuda_tolerance = {{{DType::Float32, {1e-3, 1e-4}}}, std::string(kCudaWhySumOrder) + "; " + kWhyLongSum};
    rows.push_back(std::move(r));
  }

  // --- mean --------------------------------------------------------------------------------
  {
    std::vector<Sample> s = normal_samples(200);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 204)}; }});
    OpRow r = reduction("mean_all", kFloatTypes, s, [](const Tensor& x) { return mean(x); }, {}, false, mean_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"int input", [] { mean(zeros({3, 4}, DType::Int32)); }, {"mean", "int32"}},
        {"dim out of range", [] { mean(zeros({2, 3}), {4}); }, {"mean", "dimension 4", "2-d"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("mean_dim1", kFloatTypes, normal_samples(210),
                        [](const Tensor& x) { return mean(x, {1}); }, {1}, false, mean_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"bool input", [] { mean(zeros({3}, DType::Bool), {0}); }, {"mean", "bool"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("mean_dim0_keepdim", kFloatTypes, normal_samples(220),
                        [](const Tensor& x) { return mean(x, {0}, true); }, {0}, true, mean_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("mean_dimsneg1neg2", kFloatTypes, normal_samples(230),
                        [](const Tensor& x) { return mean(x, {-1, -2}); }, {-1, -2}, false, mean_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"dim repeated", [] { mean(zeros({2, 3}), {0, -2}); }, {"mean", "[0, -2]"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }

  // --- logsumexp ---------------------------------------------------------------------------
  {
    std::vector<Sample> s = normal_samples(330);
    // Values past exp's float range (float32 overflows at 88.7): the max shift keeps them finite.
    s.push_back({"large 4x6", [](DType t, Device d) {
                   return TensorList{(rnd({4, 6}, DType::Float64, d, 334, 40.0) + 300.0).to(t)};
                 }});
    OpRow r = reduction(
        "logsumexp_dim1", kFloatTypes, s, [](const Tensor& x) { return logsumexp(x, {1}); }, {1}, false, logsumexp_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"int input",
         [] {
           logsumexp(zeros({3, 4}, DType::Int64), {1});
         },
         {"logsumexp", "int64"}},
        {"dim out of range",
         [] {
           logsumexp(zeros({2, 3}), {2});
         },
         {"logsumexp", "dimension 2", "2-d"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = normal_samples(340);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 344)}; }});
    s.push_back({"empty 0x3", [](DType t, Device d) { return TensorList{zeros({0, 3}, TensorOptions(t, d))}; }});
    OpRow r = reduction(
        "logsumexp_all_keepdim", kFloatTypes, s, [](const Tensor& x) { return logsumexp(x, {}, true); }, {}, true,
        logsumexp_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }

  {
    // logaddexp: the same shape, a broadcast, a 0-d operand, values far apart (the smaller term
    // below the larger's rounding, where log1p keeps it) and past exp's float32 range.
    const std::vector<Sample> s = {
        {"same shape 7x13",
         [](DType t, Device d) {
           return TensorList{rnd({7, 13}, t, d, 350, 3.0), rnd({7, 13}, t, d, 351, 3.0)};
         }},
        {"broadcast 3x1x5 and 4x5",
         [](DType t, Device d) {
           return TensorList{rnd({3, 1, 5}, t, d, 352, 3.0), noncontig(rnd({4, 5}, t, d, 353, 3.0))};
         }},
        {"0-d and 2x3",
         [](DType t, Device d) {
           return TensorList{rnd({}, t, d, 354), rnd({2, 3}, t, d, 355)};
         }},
        {"far apart and large 4x6",
         [](DType t, Device d) {
           return TensorList{(rnd({4, 6}, DType::Float64, d, 356, 5.0) + 300.0).to(t),
                             (rnd({4, 6}, DType::Float64, d, 357, 5.0) + 270.0).to(t)};
         }},
    };
    for (const bool base2 : {false, true}) {
      const std::string name = base2 ? "logaddexp2" : "logaddexp";
      auto op = base2 ? logaddexp2 : logaddexp;
      OpRow r = make_row(
          name, kFloatTypes, s, [op](const TensorList& in) { return TensorList{op(in[0], in[1])}; },
          ref([base2](const Values& v) {
            const double m = std::max(v[0], v[1]);
            return base2 ? m + std::log2(std::exp2(v[0] - m) + std::exp2(v[1] - m))
                         : m + std::log(std::exp(v[0] - m) + std::exp(v[1] - m));
          }),
          {0, 1}, same_dtype);
      r.errors = {
          {"integer operands",
           [op] {
             op(zeros({2, 3}, DType::Int64), zeros({3}, DType::Int32));
           },
           {name, "int64 [2, 3]", "int32 [3]"}},
          {"shapes do not broadcast",
           [op] {
             op(zeros({2, 3}), zeros({4}));
           },
           {name, "[2, 3]", "[4]"}},
          undefined_input(name, [op](const Tensor& x) { return op(x, x); }),
      };
      r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
      rows.push_back(std::move(r));
    }
  }

  // --- std, var_mean, prod ------------------------------------------------------------------
  {
    OpRow r = reduction(
        "std_dims02 correction 0", kFloatTypes, normal_samples(360),
        [](const Tensor& x) {
          return std(x, {0, 2}, 0.0);
        },
        {0, 2}, false, [](const Group& v) { return std::sqrt(var_with(0.0)(v)); });
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"int input", [] { std(zeros({3, 4}, DType::Int64)); }, {"var", "int64", "[3, 4]"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "var_mean_dim1_keepdim";
    r.dtypes = kFloatTypes;
    r.samples = normal_samples(370);
    r.op = [](const TensorList& x) {
      auto [v, m] = var_mean(x[0], {1}, 1.0, true);
      return TensorList{v, m};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(x[0], {1}, true, var_with(1.0)), ref_reduce(x[0], {1}, true, mean_of)};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    // Values around 1 keep the products in range (integers: rnd's small ones, over short lines so
    // that no product overflows int64); a line with a zero, whose gradient (the product of the
    // others) needs no division; odd and even lengths and an empty line (product 1).
    Gen around_one = [](const Shape& s, DType t, Device d, uint64_t seed) {
      return is_floating(t) ? rnd_range(s, t, d, seed, 0.5, 1.5) : rnd(s, t, d, seed);
    };
    std::vector<Sample> s = {
        {"3x5x7",
         [=](DType t, Device d) {
           return TensorList{around_one({3, 5, 7}, t, d, 380)};
         }},
        {"non-contiguous 3x6x4",
         [=](DType t, Device d) {
           return TensorList{noncontig(around_one({3, 6, 4}, t, d, 381))};
         }},
        {"a zero in 2x9x2",
         [=](DType t, Device d) {
           Tensor x = around_one({2, 9, 2}, t, d, 382);
           NoGradGuard g;
           x.narrow(1, 4, 1).fill_(0.0);
           return TensorList{x};
         }},
        {"empty line 2x0x3",
         [](DType t, Device d) {
           return TensorList{zeros({2, 0, 3}, TensorOptions(t, d))};
         }},
    };
    OpRow r = reduction(
        "prod_dim1", kAllNumeric, s, [](const Tensor& x) { return prod(x, 1); }, {1}, false, prod_of);
    r.differentiable = {0};
    r.out_dtype = sum_dtype;
    r.errors = {{"dim out of range",
                 [] {
                   prod(zeros({2, 3}), 2);
                 },
                 {"prod", "2"}},
                undefined_input("prod", [](const Tensor& x) { return prod(x); })};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
    std::vector<Sample> all = {
        {"3x5",
         [=](DType t, Device d) {
           return TensorList{around_one({3, 5}, t, d, 390)};
         }},
        {"non-contiguous 4x3",
         [=](DType t, Device d) {
           return TensorList{noncontig(around_one({4, 3}, t, d, 391))};
         }},
        {"0-d", [=](DType t, Device d) { return TensorList{around_one({}, t, d, 392)}; }},
    };
    OpRow a = reduction(
        "prod_all", kAllNumeric, all, [](const Tensor& x) { return prod(x); }, {}, false, prod_of);
    a.differentiable = {0};
    a.out_dtype = sum_dtype;
    a.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(a));
  }

  // --- var ---------------------------------------------------------------------------------
  {
    OpRow r = reduction("var_dim1", kFloatTypes, normal_samples(300), [](const Tensor& x) { return var(x, {1}); }, {1},
                        false, var_with(1.0));
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"int input", [] { var(zeros({3, 4}, DType::Int64), {1}); }, {"var", "int64", "[3, 4]"}},
        {"dim out of range", [] { var(zeros({2, 3}), {-4}); }, {"var", "dimension -4", "2-d"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("var_dimneg1_correction0_keepdim", kFloatTypes, normal_samples(310),
                        [](const Tensor& x) { return var(x, {-1}, 0.0, true); }, {-1}, true, var_with(0.0));
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("var_all", kFloatTypes, normal_samples(320), [](const Tensor& x) { return var(x); }, {}, false,
                        var_with(1.0));
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("var_all_correction0", kFloatTypes, normal_samples(330),
                        [](const Tensor& x) { return var(x, {}, 0.0); }, {}, false, var_with(0.0));
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    // Chan's pairwise merge of chunk partials; values offset by 1000 so a naive sum of squares would lose digits.
    OpRow r;
    r.name = "var_long_chunked";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {{"2x70001 offset",
                  [](DType t, Device d) { return TensorList{rnd({2, 70001}, t, d, 340) + 1000.0}; }}};
    r.op = [](const TensorList& x) { return TensorList{var(x[0], {1})}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_reduce(x[0], {1}, false, var_with(1.0))}; };
    r.out_dtype = same_dtype;
    r.cuda_tolerance = {{{DType::Float32, {1e-3, 1e-4}}}, std::string(kCudaWhySumOrder) + "; " + kWhyLongSum};
    rows.push_back(std::move(r));
  }

  // --- max / min ---------------------------------------------------------------------------
  {
    std::vector<Sample> s = distinct_samples(400);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 404)}; }});
    OpRow r = reduction("max", kAllNumeric, s, [](const Tensor& x) { return max(x); }, {}, false, max_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"empty input", [] { max(zeros({0, 3})); }, {"max", "empty", "[0, 3]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("min", kAllNumeric, distinct_samples(410), [](const Tensor& x) { return min(x); }, {}, false,
                        min_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"empty input", [] { min(zeros({2, 0, 3})); }, {"min", "empty", "[2, 0, 3]"}}};
    rows.push_back(std::move(r));
  }
  {
    // Along a dim: values and int64 indices; the gradient flows to the indexed element.
    OpRow r;
    r.name = "max_dim1";
    r.dtypes = kAllNumeric;
    r.samples = distinct_samples(420);
    r.op = [](const TensorList& x) {
      auto [v, i] = max(x[0], 1);
      return TensorList{v, i};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(x[0], {1}, false, max_of), ref_reduce(x[0], {1}, false, argmax_of)};
    };
    r.differentiable = {0};
    r.exact_outputs = {1};
    r.out_dtype = same_dtype;
    r.errors = {
        {"dim out of range", [] { max(zeros({2, 3}), 2); }, {"max", "dimension 2", "2-d"}},
        {"empty dim", [] { max(zeros({3, 0}), 1); }, {"max", "empty", "[3, 0]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "max_dimneg1_keepdim";
    r.dtypes = kAllNumeric;
    r.samples = distinct_samples(430);
    r.op = [](const TensorList& x) {
      auto [v, i] = max(x[0], -1, true);
      return TensorList{v, i};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(x[0], {-1}, true, max_of), ref_reduce(x[0], {-1}, true, argmax_of)};
    };
    r.differentiable = {0};
    r.exact_outputs = {1};
    r.out_dtype = same_dtype;
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "min_dim0";
    r.dtypes = kAllNumeric;
    r.samples = distinct_samples(440);
    r.op = [](const TensorList& x) {
      auto [v, i] = min(x[0], 0);
      return TensorList{v, i};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(x[0], {0}, false, min_of), ref_reduce(x[0], {0}, false, argmin_of)};
    };
    r.differentiable = {0};
    r.exact_outputs = {1};
    r.out_dtype = same_dtype;
    r.errors = {{"dim out of range", [] { min(zeros({2, 3}), -3); }, {"min", "dimension -3", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("amax_dims02", kAllNumeric, distinct_samples(450),
                        [](const Tensor& x) { return amax(x, {0, 2}); }, {0, 2}, false, max_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"dim out of range", [] { amax(zeros({2, 3}), {0, 2}); }, {"amax", "dimension 2", "2-d"}},
        {"empty dims reduced", [] { amax(zeros({4, 0}), {1}); }, {"amax", "empty", "[4, 0]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("amax_dim1_keepdim", kAllNumeric, distinct_samples(460),
                        [](const Tensor& x) { return amax(x, {1}, true); }, {1}, true, max_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("amin_dimsneg1", kAllNumeric, distinct_samples(470),
                        [](const Tensor& x) { return amin(x, {-1}); }, {-1}, false, min_of);
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    rows.push_back(std::move(r));
  }

  // --- argmax / argmin ---------------------------------------------------------------------
  {
    OpRow r = reduction("argmax", kAllNumeric, distinct_samples(500), [](const Tensor& x) { return argmax(x); }, {},
                        false, argmax_of);
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {
        {"empty input", [] { argmax(zeros({0})); }, {"argmax", "empty", "[0]"}},
        {"dim out of range", [] { argmax(zeros({2, 3}), 2); }, {"argmax", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("argmax_dim1_keepdim", kAllNumeric, distinct_samples(510),
                        [](const Tensor& x) { return argmax(x, 1, true); }, {1}, true, argmax_of);
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {{"empty dim", [] { argmax(zeros({2, 0}), 1); }, {"argmax", "empty", "[2, 0]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("argmin", kAllNumeric, distinct_samples(520), [](const Tensor& x) { return argmin(x); }, {},
                        false, argmin_of);
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {{"empty input", [] { argmin(zeros({3, 0})); }, {"argmin", "empty", "[3, 0]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("argmin_dimneg1", kAllNumeric, distinct_samples(530),
                        [](const Tensor& x) { return argmin(x, -1); }, {-1}, false, argmin_of);
    r.out_dtype = [](DType) { return DType::Int64; };
    rows.push_back(std::move(r));
  }
  {
    // The chunked path: partials of 32768 elements merged in order. Distinct values in float32 are
    // multiples of 0.25 (exact); half types and uint8 cannot hold 140k distinct values.
    OpRow r;
    r.name = "argmax_long_chunked";
    r.dtypes = {DType::Float32, DType::Float64, DType::Int32, DType::Int64};
    r.samples = {
        {"140002", [](DType t, Device d) { return TensorList{rnd_distinct({140002}, t, d, 540)}; }},
        {"non-contiguous 2x70001",
         [](DType t, Device d) { return TensorList{noncontig(rnd_distinct({2, 70001}, t, d, 541))}; }},
    };
    r.op = [](const TensorList& x) { return TensorList{argmax(x[0]), argmin(x[0]), max(x[0])}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(x[0], {}, false, argmax_of), ref_reduce(x[0], {}, false, argmin_of),
                        ref_reduce(x[0], {}, false, max_of)};
    };
    rows.push_back(std::move(r));
  }

  // --- any / all ---------------------------------------------------------------------------
  const std::vector<DType> logical_types{DType::Bool, DType::Float32, DType::Int32, DType::UInt8};
  {
    OpRow r = reduction("any", logical_types, logical_samples(600), [](const Tensor& x) { return any(x); }, {}, false,
                        any_of);
    r.out_dtype = [](DType) { return DType::Bool; };
    r.errors = {{"dim out of range", [] { any(zeros({2, 3}, DType::Bool), {3}); }, {"any", "dimension 3", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("any_dimneg1", logical_types, logical_samples(610),
                        [](const Tensor& x) { return any(x, {-1}); }, {-1}, false, any_of);
    r.out_dtype = [](DType) { return DType::Bool; };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("all", logical_types, logical_samples(620), [](const Tensor& x) { return all(x); }, {}, false,
                        all_of);
    r.out_dtype = [](DType) { return DType::Bool; };
    r.errors = {{"dim out of range", [] { all(zeros({2, 3}, DType::Bool), {-3}); }, {"all", "dimension -3", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction("all_dim1_keepdim", logical_types, logical_samples(630),
                        [](const Tensor& x) { return all(x, {1}, true); }, {1}, true, all_of);
    r.out_dtype = [](DType) { return DType::Bool; };
    rows.push_back(std::move(r));
  }

  // --- nansum, nanmean, count_nonzero, aminmax ------------------------------------------------
  {
    // Every fourth element NaN (floats): left out of the sum; integers have none.
    OpRow r = reduction(
        "nansum dims02", kAllNumeric, nan_samples(640),
        [](const Tensor& x) {
          return nansum(x, {0, 2});
        },
        {0, 2}, false,
        [](const Group& v) {
          double s = 0;
          for (double e : v) s += std::isnan(e) ? 0.0 : e;
          return s;
        });
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return is_floating(t) ? t : DType::Int64; };
    r.errors = {{"dim out of range", [] { nansum(zeros({2, 3}), {2}); }, {"nansum", "dimension 2", "2-d"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction(
        "nanmean dim1 keepdim", kFloatTypes, nan_samples(650), [](const Tensor& x) { return nanmean(x, {1}, true); },
        {1}, true,
        [](const Group& v) {
          double s = 0, n = 0;
          for (double e : v) {
            if (!std::isnan(e)) {
              s += e;
              n += 1;
            }
          }
          return s / n;
        });
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"integer input",
                 [] {
                   nanmean(zeros({2, 3}, DType::Int64));
                 },
                 {"nanmean", "int64"}},
                {"dim out of range",
                 [] {
                   nanmean(zeros({2, 3}), {-3});
                 },
                 {"nanmean", "dimension -3"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = reduction(
        "count_nonzero dim1", logical_types, logical_samples(660),
        [](const Tensor& x) { return count_nonzero(x, {1}); }, {1}, false,
        [](const Group& v) {
          double c = 0;
          for (double e : v) c += e != 0 ? 1.0 : 0.0;
          return c;
        });
    r.exact_outputs = {0};
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {{"dim out of range", [] { count_nonzero(zeros({2, 3}), {5}); }, {"count_nonzero", "dimension 5"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "aminmax dim0 and of all";
    r.dtypes = kAllNumeric;
    r.samples = distinct_samples(670);
    r.op = [](const TensorList& x) {
      const auto [lo, hi] = aminmax(x[0], 0);
      const auto [lo_all, hi_all] = aminmax(x[0]);
      return TensorList{lo, hi, lo_all, hi_all};
    };
    r.reference = [](const TensorList& x) {
      auto lo = [](const Group& v) { return *std::min_element(v.begin(), v.end()); };
      auto hi = [](const Group& v) { return *std::max_element(v.begin(), v.end()); };
      return TensorList{ref_reduce(x[0], {0}, false, lo), ref_reduce(x[0], {0}, false, hi),
                        ref_reduce(x[0], {}, false, lo), ref_reduce(x[0], {}, false, hi)};
    };
    r.differentiable = {0};
    r.exact_outputs = {0, 1, 2, 3};
    r.out_dtype = same_dtype;
    r.errors = {{"dim out of range", [] { aminmax(zeros({2, 3}), 2); }, {"aminmax", "dimension 2"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
