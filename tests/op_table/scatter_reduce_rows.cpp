// Op table rows of scatter_reduce and index_reduce: every reduction with and without x's own value.
// Indices repeat (several writes meet at most positions) and leave some positions unwritten, so
// the rows see both kinds of position; gradchecks run on distinct values, so amax and amin have
// no ties there (tests/core/test_scatter_reduce.cpp checks how ties split the gradient).
#include <cmath>
#include <utility>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

const ScatterReduce kReductions[] = {ScatterReduce::Sum, ScatterReduce::Prod, ScatterReduce::Mean, ScatterReduce::Amax,
                                     ScatterReduce::Amin};

// The float64 reference: each position's values (x's first with include_self) reduced in order.
// Integer means round down (floor), as scatter_reduce's.
Tensor ref_reduce_writes(const Tensor& x, const std::vector<std::pair<int64_t, double>>& writes, ScatterReduce reduce,
                         bool include_self) {
  const Values xv = values(x);
  std::vector<Values> at_pos(xv.size());
  for (size_t i = 0; include_self && i < xv.size(); ++i) at_pos[i].push_back(xv[i]);
  std::vector<bool> written(xv.size(), false);
  for (const auto& [pos, v] : writes) {
    at_pos[at(pos)].push_back(v);
    written[at(pos)] = true;
  }
  Values out = xv;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (!written[i]) continue;  // positions nothing is written to keep x's value
    const Values& v = at_pos[i];
    double r = v[0];
    for (size_t k = 1; k < v.size(); ++k) {
      switch (reduce) {
        case ScatterReduce::Sum:
        case ScatterReduce::Mean: r += v[k]; break;
        case ScatterReduce::Prod: r *= v[k]; break;
        case ScatterReduce::Amax: r = std::max(r, v[k]); break;
        case ScatterReduce::Amin: r = std::min(r, v[k]); break;
      }
    }
    if (reduce == ScatterReduce::Mean) {
      r /= static_cast<double>(v.size());
      if (!x.is_floating_point()) r = std::floor(r);
    }
    out[i] = r;
  }
  return from_values(out, x.sizes());
}

// scatter_reduce's writes: (position in x read as 1-d, value) for each index element.
std::vector<std::pair<int64_t, double>> scatter_writes(const Tensor& x, int64_t dim, const Tensor& index,
                                                       const Tensor& src) {
  const Values iv = values(index), sv = values(src);
  std::vector<std::pair<int64_t, double>> writes;
  for (int64_t n = 0; n < index.numel(); ++n) {
    Shape p = unravel(n, index.sizes());
    const double v = sv[at(ravel(p, src.sizes()))];
    p[at(dim)] = static_cast<int64_t>(iv[at(n)]);
    writes.emplace_back(ravel(p, x.sizes()), v);
  }
  return writes;
}

std::string row_name(const char* op, ScatterReduce reduce, bool include_self) {
  return std::string(op) + " " + scatter_reduce_name(reduce) + (include_self ? "" : " exclude self");
}

// Prod multiplies up to a few values: integer rows stay in range for int32 and int64 but not uint8.
std::vector<DType> reduce_dtypes(ScatterReduce reduce) {
  if (reduce != ScatterReduce::Prod) return kAllNumeric;
  return {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64};
}

// Amax and amin see distinct values, and src's (shifted) never equal x's: no ties, so the
// gradient is unambiguous. The other reductions see rnd's values.
Tensor draw(ScatterReduce reduce, const Shape& shape, DType t, Device d, uint64_t seed, bool src = false) {
  if (reduce != ScatterReduce::Amax && reduce != ScatterReduce::Amin) return rnd(shape, t, d, seed);
  if (!src || !is_floating(t)) return rnd_distinct(shape, t, d, seed);
  const Tensor v = rnd_distinct(shape, DType::Float64, Device::cpu(), seed);
  // rnd_distinct's steps: 1 for half types, 0.25 for the others; half a step stays exact.
  const bool half = t == DType::Float16 || t == DType::BFloat16;
  return add(mul(v, half ? 4.0 : 1.0), half ? 0.5 : 0.125).to(t).to(d);
}

Tensor index_values(const Shape& shape, int64_t high, uint64_t seed, Device d, DType t = DType::Int64) {
  return class_targets(shape, high, seed, 0, 0, d).to(t);
}

}  // namespace

void add_scatter_reduce_rows(std::vector<OpRow>& rows) {
  for (const ScatterReduce reduce : kReductions) {
    for (const bool include_self : {true, false}) {
      // Along dim 1. Index values stop short of the dim's size, so the last positions along it are
      // never written; src is larger than index in the first sample.
      OpRow r;
      r.name = row_name("scatter_reduce", reduce, include_self);
      r.dtypes = reduce_dtypes(reduce);
      r.samples = {
          {"7x6, index 5x8 in [0, 4), src 6x9",
           [reduce](DType t, Device d) {
             return TensorList{draw(reduce, {7, 6}, t, d, 3100), index_values({5, 8}, 4, 3101, d),
                               draw(reduce, {6, 9}, t, d, 3102, true)};
           }},
          {"non-contiguous 3x5x4, int32 index 3x7x4",
           [reduce](DType t, Device d) {
             return TensorList{noncontig(draw(reduce, {3, 5, 4}, t, d, 3103)),
                               index_values({3, 7, 4}, 5, 3104, d, DType::Int32),
                               noncontig(draw(reduce, {3, 7, 4}, t, d, 3105, true))};
           }},
          {"1-d 6, index 0-d",
           [reduce](DType t, Device d) {
             return TensorList{draw(reduce, {6}, t, d, 3106), index_values({}, 6, 3107, d),
                               draw(reduce, {}, t, d, 3108, true)};
           }},
      };
      r.op = [reduce, include_self](const TensorList& x) {
        return TensorList{scatter_reduce(x[0], x[0].dim() == 1 ? 0 : 1, x[1], x[2], reduce, include_self)};
      };
      r.reference = [reduce, include_self](const TensorList& x) {
        const bool flat = x[0].dim() <= 1;  // the 1-d sample: every tensor read as 1-d
        const Tensor xs = flat ? x[0].reshape({-1}) : x[0];
        const Tensor is = flat ? x[1].reshape({-1}) : x[1];
        const Tensor ss = flat ? x[2].reshape({-1}) : x[2];
        const auto writes = scatter_writes(xs, flat ? 0 : 1, is, ss);
        return TensorList{ref_reduce_writes(xs, writes, reduce, include_self).reshape(x[0].sizes())};
      };
      r.differentiable = {0, 2};
      r.out_dtype = same_dtype;
      r.errors = {
          {"bool tensors",
           [reduce] {
             scatter_reduce(zeros({3}, DType::Bool), 0, zeros({2}, DType::Int64), zeros({2}, DType::Bool), reduce);
           },
           {"scatter_reduce", "bool", scatter_reduce_name(reduce)}},
          {"index out of range",
           [reduce] {
             scatter_reduce(zeros({3, 4}), 1, full({3, 1}, 4, DType::Int64), ones({3, 1}), reduce);
           },
           {"scatter_reduce", "index 4", "size 4"}},
          {"src dtype differs",
           [reduce] {
             scatter_reduce(zeros({3, 4}), 0, zeros({1, 2}, DType::Int64), zeros({1, 2}, DType::Float64), reduce);
           },
           {"scatter_reduce", "float64", "float32"}},
          {"index larger than src",
           [reduce] {
             scatter_reduce(zeros({3, 4}), 0, zeros({2, 4}, DType::Int64), zeros({1, 4}), reduce);
           },
           {"scatter_reduce", "[2, 4]", "[1, 4]"}},
          {"index of fewer dims",
           [reduce] {
             scatter_reduce(zeros({3, 4}), 0, zeros({4}, DType::Int64), zeros({3, 4}), reduce);
           },
           {"scatter_reduce", "same number of dims", "[4]"}},
      };
      rows.push_back(std::move(r));
    }
  }
  {
    OpRow r;
    r.name = "scatter_reduce_mode names";
    r.dtypes = {DType::Float64};
    r.samples = {{"5", [](DType t, Device d) { return TensorList{rnd({5}, t, d, 3109)}; }}};
    // Each name parses to the reduction of that name: a sum by name equals a sum by enum.
    r.op = [](const TensorList& x) {
      const Tensor index = zeros({5}, TensorOptions(DType::Int64, x[0].device()));
      return TensorList{scatter_reduce(x[0], 0, index, x[0], scatter_reduce_mode("test", "amax"))};
    };
    r.reference = [](const TensorList& x) {
      const Tensor index = zeros({5}, DType::Int64);
      return TensorList{ref_reduce_writes(x[0], scatter_writes(x[0], 0, index, x[0]), ScatterReduce::Amax, true)};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"an unknown name",
                 [] { scatter_reduce_mode("scatter_reduce", "max"); },
                 {"scatter_reduce", "\"max\"", "amax"}}};
    rows.push_back(std::move(r));
  }

  for (const ScatterReduce reduce : kReductions) {
    for (const bool include_self : {true, false}) {
      // Slices along dim 0 (and a 0-d index into a 1-d input); the index repeats slices 3 and 0.
      OpRow r;
      r.name = row_name("index_reduce", reduce, include_self);
      r.dtypes = reduce_dtypes(reduce);
      r.samples = {
          {"6x4, index [3, 0, 3, 1, 0]",
           [reduce](DType t, Device d) {
             return TensorList{draw(reduce, {6, 4}, t, d, 3110), from_values({3, 0, 3, 1, 0}, {5}, DType::Int64).to(d),
                               draw(reduce, {5, 4}, t, d, 3111, true)};
           }},
          {"transposed 5x3, int32 index [4, 4]",
           [reduce](DType t, Device d) {
             return TensorList{draw(reduce, {3, 5}, t, d, 3112).t(), from_values({4, 4}, {2}, DType::Int32).to(d),
                               noncontig(draw(reduce, {2, 3}, t, d, 3113, true))};
           }},
      };
      r.op = [reduce, include_self](const TensorList& x) {
        return TensorList{index_reduce(x[0], 0, x[1], x[2], reduce, include_self)};
      };
      r.reference = [reduce, include_self](const TensorList& x) {
        const Values iv = values(x[1]), sv = values(x[2]);
        std::vector<std::pair<int64_t, double>> writes;
        for (int64_t n = 0; n < x[2].numel(); ++n) {
          Shape p = unravel(n, x[2].sizes());
          p[0] = static_cast<int64_t>(iv[at(p[0])]);
          writes.emplace_back(ravel(p, x[0].sizes()), sv[at(n)]);
        }
        return TensorList{ref_reduce_writes(x[0], writes, reduce, include_self)};
      };
      r.differentiable = {0, 2};
      r.out_dtype = same_dtype;
      r.errors = {
          {"source of the wrong shape",
           [reduce] {
             index_reduce(zeros({3, 4}), 1, from_values({0, 1}, {2}, DType::Int64), zeros({3, 3}), reduce);
           },
           {"index_reduce", "[3, 3]", "[3, 4]", "2"}},
          {"index out of range",
           [reduce] {
             index_reduce(zeros({3, 4}), 0, from_values({3}, {1}, DType::Int64), zeros({1, 4}), reduce);
           },
           {"index_reduce", "index 3", "size 3"}},
          {"2-d index",
           [reduce] {
             index_reduce(zeros({3, 4}), 0, zeros({1, 1}, DType::Int64), zeros({1, 4}), reduce);
           },
           {"index_reduce", "[1, 1]"}},
      };
      rows.push_back(std::move(r));
    }
  }
}

}  // namespace kiln::test
