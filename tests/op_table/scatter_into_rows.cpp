// Op table rows of the scatter_into family: select_scatter, slice_scatter (a strided slice with a
// negative start, and the whole dim), diagonal_scatter (above and below the main diagonal, the
// dims in either order) and masked_scatter (a broadcast mask), against references that write src
// into a copy of the input with plain index arithmetic. Values are only moved: exact in every
// dtype.
#include <algorithm>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

OpRow moving(const std::string& name, std::vector<Sample> samples, ListFn op, ListFn reference,
             std::vector<size_t> differentiable) {
  OpRow r = make_row(name, kAllNumeric, std::move(samples), std::move(op), std::move(reference),
                     std::move(differentiable), same_dtype);
  for (DType t : kAllNumeric) r.tolerance[t] = {0, 0};
  return r;
}

// An input of `shape` and a src of `src_shape`, the input non-contiguous when asked.
Sample pair(const std::string& name, Shape shape, Shape src_shape, uint64_t seed, bool strided = false) {
  return {name, [=](DType t, Device d) {
            const Tensor input = rnd(shape, t, d, seed);
            return TensorList{strided ? noncontig(input) : input, rnd(src_shape, t, d, seed + 1)};
          }};
}

// A copy of input whose element at each index where(index) names is src's element there.
Tensor ref_write(const Tensor& input, const Tensor& src,
                 const std::function<std::optional<Shape>(const Shape&)>& src_index) {
  Values out = values(input);
  const Values sv = values(src);
  for (int64_t e = 0; e < input.numel(); ++e) {
    if (auto s = src_index(unravel(e, input.sizes()))) out[at(e)] = sv[at(ravel(*s, src.sizes()))];
  }
  return from_values(out, input.sizes());
}

}  // namespace

void add_scatter_into_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = moving(
        "select_scatter dim 1 index -2",
        {pair("[3, 5, 7]", {3, 5, 7}, {3, 7}, 3301), pair("non-contiguous [3, 5, 9]", {3, 5, 9}, {3, 9}, 3303, true)},
        [](const TensorList& x) { return TensorList{select_scatter(x[0], x[1], 1, -2)}; },
        [](const TensorList& x) {
          const int64_t index = x[0].size(1) - 2;
          return TensorList{ref_write(x[0], x[1], [index](Shape i) -> std::optional<Shape> {
            if (i[1] != index) return std::nullopt;
            i.erase(i.begin() + 1);
            return i;
          })};
        },
        {0, 1});
    r.errors = {{"src of the wrong shape",
                 [] {
                   select_scatter(zeros({3, 5}), zeros({5}), 1, 0);
                 },
                 {"select_scatter", "[3]", "[5]", "[3, 5]"}},
                {"index out of range",
                 [] {
                   select_scatter(zeros({3, 5}), zeros({3}), 1, 5);
                 },
                 {"select_scatter", "index 5", "[3, 5]"}},
                {"another dtype",
                 [] {
                   select_scatter(zeros({3, 5}), zeros({3}, DType::Float64), 1, 0);
                 },
                 {"select_scatter", "float32", "float64"}}};
    rows.push_back(std::move(r));
  }
  {
    // -6:7:2 of 7 along dim 2 is 1, 3, 5; of 9 (non-contiguous) it is 3, 5.
    OpRow r = moving(
        "slice_scatter dim 2 -6:7:2",
        {pair("[3, 5, 7]", {3, 5, 7}, {3, 5, 3}, 3311),
         pair("non-contiguous [3, 5, 9]", {3, 5, 9}, {3, 5, 2}, 3313, true)},
        [](const TensorList& x) { return TensorList{slice_scatter(x[0], x[1], 2, -6, 7, 2)}; },
        [](const TensorList& x) {
          const int64_t first = x[0].size(2) - 6;
          return TensorList{ref_write(x[0], x[1], [first](Shape i) -> std::optional<Shape> {
            if (i[2] < first || i[2] >= 7 || (i[2] - first) % 2 != 0) return std::nullopt;
            i[2] = (i[2] - first) / 2;
            return i;
          })};
        },
        {0, 1});
    r.errors = {{"src of the slice's wrong length",
                 [] {
                   slice_scatter(zeros({3, 6}), zeros({3, 2}), 1, 0, 6, 2);
                 },
                 {"slice_scatter", "[3, 3]", "[3, 2]", "0:6:2"}},
                {"step 0",
                 [] {
                   slice_scatter(zeros({3, 6}), zeros({3, 6}), 1, 0, 6, 0);
                 },
                 {"slice_scatter", "step", "0"}},
                undefined_input("slice_scatter", [](const Tensor& t) { return slice_scatter(t, zeros({1}), 0); })};
    rows.push_back(std::move(r));
  }
  rows.push_back(moving(
      "slice_scatter the whole dim 0", {pair("[4, 3]", {4, 3}, {4, 3}, 3321)},
      [](const TensorList& x) { return TensorList{slice_scatter(x[0], x[1])}; },
      [](const TensorList& x) { return TensorList{x[1].to(DType::Float64)}; }, {0, 1}));
  for (int64_t offset : {1, -2}) {
    // dims 0 and 2 of [4, 3, 5] with offset 1: diagonal of 4 cells; dims 2 and 0 with offset -2:
    // rows are dim 2 (5), columns dim 0 (4), cells (2, 0), (3, 1), (4, 2): 3 of them.
    const int64_t d1 = offset > 0 ? 0 : 2, d2 = offset > 0 ? 2 : 0;
    const int64_t length = offset > 0 ? 4 : 3;
    OpRow r = moving(
        "diagonal_scatter offset " + std::to_string(offset) + " dims " + std::to_string(d1) + ", " + std::to_string(d2),
        {pair("[4, 3, 5]", {4, 3, 5}, {3, length}, 3331), pair("non-contiguous", {4, 3, 5}, {3, length}, 3333, true)},
        [=](const TensorList& x) { return TensorList{diagonal_scatter(x[0], x[1], offset, d1, d2)}; },
        [=](const TensorList& x) {
          return TensorList{ref_write(x[0], x[1], [=](const Shape& i) -> std::optional<Shape> {
            const int64_t row = i[at(d1)], col = i[at(d2)];
            if (col - row != offset) return std::nullopt;
            return Shape{i[1], offset >= 0 ? row : col};
          })};
        },
        {0, 1});
    if (offset > 0) {
      r.errors = {
          {"src of the diagonal's wrong length",
           [] {
             diagonal_scatter(zeros({3, 4}), zeros({4}));
           },
           {"diagonal_scatter", "[3]", "[4]", "[3, 4]"}},
          {"the same dim twice",
           [] {
             diagonal_scatter(zeros({3, 4}), zeros({3}), 0, 1, 1);
           },
           {"diagonal_scatter", "differ", "[3, 4]"}},
          {"a 1-d input", [] { diagonal_scatter(zeros({3}), zeros({3})); }, {"diagonal_scatter", "2 dims", "[3]"}}};
    }
    rows.push_back(std::move(r));
  }
  {
    // A [3, 1, 5] mask over a [3, 4, 5] input: each (i, k) true in the mask fills the whole column
    // (i, :, k); source has more elements than needed.
    auto sample = [](const std::string& name, bool strided) {
      return Sample{name, [=](DType t, Device d) {
                      const Tensor input = rnd({3, 4, 5}, t, d, 3341);
                      return TensorList{strided ? noncontig(input) : input, rnd({3, 1, 5}, DType::Bool, d, 3342),
                                        rnd({70}, t, d, 3343)};
                    }};
    };
    OpRow r = moving(
        "masked_scatter broadcast mask", {sample("[3, 4, 5]", false), sample("non-contiguous", true)},
        [](const TensorList& x) { return TensorList{masked_scatter(x[0], x[1], x[2])}; },
        [](const TensorList& x) {
          const Values mask = values(x[1]), src = values(x[2]);
          Values out = values(x[0]);
          size_t next = 0;
          for (int64_t e = 0; e < x[0].numel(); ++e) {
            const Shape i = unravel(e, x[0].sizes());
            if (mask[at(i[0] * 5 + i[2])] != 0) out[at(e)] = src[next++];
          }
          return TensorList{from_values(out, x[0].sizes())};
        },
        {0, 2});
    r.errors = {{"too small a source",
                 [] {
                   masked_scatter(zeros({2, 3}), ones({2, 3}, DType::Bool), zeros({5}));
                 },
                 {"masked_scatter", "6", "[5]"}},
                {"a float mask",
                 [] {
                   masked_scatter(zeros({2, 3}), ones({2, 3}), zeros({6}));
                 },
                 {"masked_scatter", "bool", "float32"}},
                {"a mask that does not broadcast",
                 [] {
                   masked_scatter(zeros({2, 3}), ones({2, 3, 1}, DType::Bool), zeros({6}));
                 },
                 {"masked_scatter", "[2, 3, 1]", "[2, 3]"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
