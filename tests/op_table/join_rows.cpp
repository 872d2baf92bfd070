// Op table rows of the join family: tiled, repeat_interleave (a count, counts per slice,
// flattened), atleast_3d, hstack, vstack, dstack, column_stack, tensor_split (by count and at
// indices, negative and past-the-end ones included), and fliplr and flipud. References move values
// with plain index arithmetic; every dtype is exact, since values are only moved.
#include <algorithm>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// A row of an op that only moves values: every numeric dtype, exact, gradients through the views
// and index_select underneath.
OpRow moving(const std::string& name, std::vector<Sample> samples, ListFn op, ListFn reference,
             std::vector<size_t> differentiable = {0}) {
  OpRow r = make_row(name, kAllNumeric, std::move(samples), std::move(op), std::move(reference),
                     std::move(differentiable), same_dtype);
  for (DType t : kAllNumeric) r.tolerance[t] = {0, 0};
  return r;
}

Sample shapes(const std::string& name, std::vector<Shape> list, uint64_t seed) {
  return {name, [=](DType t, Device d) {
            TensorList out;
            for (size_t k = 0; k < list.size(); ++k) out.push_back(rnd(list[k], t, d, seed + k));
            return out;
          }};
}

// The tensors joined along dim of the result, each first given the shape `shaped` says.
Tensor ref_join(const TensorList& xs, const std::function<Shape(const Tensor&)>& shaped, int64_t dim) {
  Shape os = shaped(xs[0]);
  os[at(dim)] = 0;
  for (const Tensor& t : xs) os[at(dim)] += shaped(t)[at(dim)];
  Values out(at(shape_numel(os)));
  int64_t offset = 0;
  for (const Tensor& t : xs) {
    const Shape s = shaped(t);
    const Values v = values(t);  // row-major, the same order as in the reshaped view
    for (int64_t e = 0; e < t.numel(); ++e) {
      Shape idx = unravel(e, s);
      idx[at(dim)] += offset;
      out[at(ravel(idx, os))] = v[at(e)];
    }
    offset += s[at(dim)];
  }
  return from_values(out, os);
}

// Pieces [start, end) of x along dim.
TensorList ref_pieces(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& bounds, int64_t dim) {
  TensorList out;
  for (const auto& bound : bounds) {
    const int64_t start = bound.first, end = bound.second;
    Shape ps = x.sizes();
    ps[at(dim)] = end - start;
    out.push_back(ref_pick(x, ps, [dim, start](Shape i) {
      i[at(dim)] += start;
      return i;
    }));
  }
  return out;
}

// x with each slice along dim repeated counts[i] times.
Tensor ref_interleave(const Tensor& x, const std::vector<int64_t>& counts, int64_t dim) {
  std::vector<int64_t> source;
  for (size_t i = 0; i < counts.size(); ++i) source.insert(source.end(), at(counts[i]), static_cast<int64_t>(i));
  Shape os = x.sizes();
  os[at(dim)] = static_cast<int64_t>(source.size());
  return ref_pick(x, os, [&source, dim](Shape i) {
    i[at(dim)] = source[at(i[at(dim)])];
    return i;
  });
}

void add_tile_and_interleave(std::vector<OpRow>& rows) {
  // reps naming fewer dims than x (leading ones kept) and more (a new leading dim).
  for (const Shape& reps : {Shape{2, 1}, Shape{2, 1, 3, 2}}) {
    OpRow r = moving(
        "tiled " + shape_str(reps), one_input_samples(3101),
        [reps](const TensorList& x) { return TensorList{tiled(x[0], reps)}; },
        [reps](const TensorList& x) {
          Shape full(at(std::max<int64_t>(x[0].dim() - static_cast<int64_t>(reps.size()), 0)), 1);
          full.insert(full.end(), reps.begin(), reps.end());
          const int64_t extra = static_cast<int64_t>(full.size()) - x[0].dim();
          Shape os;
          for (size_t k = 0; k < full.size(); ++k)
            os.push_back(full[k] * (static_cast<int64_t>(k) < extra ? 1 : x[0].size(static_cast<int64_t>(k) - extra)));
          return TensorList{ref_pick(x[0], os, [&x, extra](const Shape& i) {
            Shape s;
            for (int64_t k = extra; k < static_cast<int64_t>(i.size()); ++k)
              s.push_back(i[at(k)] % x[0].size(k - extra));
            return s;
          })};
        });
    if (reps.size() == 2) {
      r.errors = {{"a negative rep",
                   [] {
                     tiled(ones({2, 3}), {2, -1});
                   },
                   {"tiled", "reps", "[2, -1]"}},
                  undefined_input("tiled", [](const Tensor& t) { return tiled(t, {2}); })};
    }
    rows.push_back(std::move(r));
  }
  {
    OpRow r = moving(
        "repeat_interleave 2 along dim 1", one_input_samples(3111),
        [](const TensorList& x) { return TensorList{repeat_interleave(x[0], 2, 1)}; },
        [](const TensorList& x) {
          return TensorList{ref_interleave(x[0], std::vector<int64_t>(at(x[0].size(1)), 2), 1)};
        });
    r.errors = {{"negative repeats",
                 [] {
                   repeat_interleave(ones({2, 3}), -1, 0);
                 },
                 {"repeat_interleave", "-1"}},
                {"dim out of range",
                 [] {
                   repeat_interleave(ones({2, 3}), 2, 2);
                 },
                 {"repeat_interleave", "dim 2", "[2, 3]"}}};
    rows.push_back(std::move(r));
  }
  rows.push_back(moving(
      "repeat_interleave 3, flattened", {shapes("[2, 3]", {{2, 3}}, 3121), shapes("0-d", {{}}, 3123)},
      [](const TensorList& x) { return TensorList{repeat_interleave(x[0], 3)}; },
      [](const TensorList& x) {
        const Tensor flat = from_values(values(x[0]), {x[0].numel()});
        return TensorList{ref_interleave(flat, std::vector<int64_t>(at(x[0].numel()), 3), 0)};
      }));
  {
    // Counts per slice along dim 0, a zero among them (that slice dropped); the counts as int64
    // and int32 tensors (integer inputs are never converted).
    const std::vector<int64_t> counts{2, 0, 3, 1};
    auto sample = [counts](const std::string& name, DType count_dtype, bool strided) {
      return Sample{name, [=](DType t, Device d) {
                      const Tensor x = rnd({4, 3, 5}, t, d, 3131);
                      return TensorList{strided ? noncontig(x) : x,
                                        tensor(counts, {4}, TensorOptions(DType::Int64, d)).to(count_dtype)};
                    }};
    };
    OpRow r = moving(
        "repeat_interleave counts along dim 0",
        {sample("[4, 3, 5], int64 counts", DType::Int64, false),
         sample("non-contiguous, int32 counts", DType::Int32, true)},
        [](const TensorList& x) { return TensorList{repeat_interleave(x[0], x[1], 0)}; },
        [counts](const TensorList& x) { return TensorList{ref_interleave(x[0], counts, 0)}; });
    r.errors = {{"a count per element of the wrong length",
                 [] {
                   repeat_interleave(ones({4, 3}), tensor<int64_t>({1, 2}), 0);
                 },
                 {"repeat_interleave", "[2]", "[4, 3]"}},
                {"a negative count",
                 [] {
                   repeat_interleave(ones({2}), tensor<int64_t>({1, -2}), 0);
                 },
                 {"repeat_interleave", ">= 0", "-2"}},
                {"float counts",
                 [] { repeat_interleave(ones({2}), ones({2}), 0); },
                 {"repeat_interleave", "integers", "float32"}},
                {"2-d counts",
                 [] {
                   repeat_interleave(ones({2}), tensor<int64_t>({1, 1}, {1, 2}));
                 },
                 {"repeat_interleave", "[1, 2]"}}};
    rows.push_back(std::move(r));
  }
}

void add_stacks(std::vector<OpRow>& rows) {
  auto rank_at_least = [](int64_t rank, std::vector<int64_t> at_front) {
    return [rank, at_front](const Tensor& t) {
      Shape s = t.sizes();
      for (int64_t p : at_front)
        if (static_cast<int64_t>(s.size()) < rank) s.insert(s.begin() + p, 1);
      return s;
    };
  };
  rows.push_back(moving(
      "atleast_3d", {shapes("0-d", {{}}, 3141), shapes("[5]", {{5}}, 3142), shapes("[3, 4]", {{3, 4}}, 3143)},
      [](const TensorList& x) { return TensorList{atleast_3d(x[0])}; },
      [](const TensorList& x) {
        Shape s = x[0].sizes();
        if (s.empty()) s = {1, 1, 1};
        if (s.size() == 1) s = {1, s[0], 1};
        if (s.size() == 2) s.push_back(1);
        return TensorList{from_values(values(x[0]), s)};
      }));
  {
    OpRow r = moving(
        "hstack",
        {shapes("[2, 3], [2, 1], [2, 4]", {{2, 3}, {2, 1}, {2, 4}}, 3151),
         shapes("[3], 0-d, [2]", {{3}, {}, {2}}, 3154)},
        [](const TensorList& x) { return TensorList{hstack(x)}; },
        [rank_at_least](const TensorList& x) {
          return TensorList{ref_join(x, rank_at_least(1, {0}), x[0].dim() <= 1 ? 0 : 1)};
        },
        {0, 1, 2});
    r.errors = {{"rows that differ",
                 [] {
                   hstack({ones({2, 3}), ones({3, 3})});
                 },
                 {"hstack", "[2, 3]", "[3, 3]"}},
                {"an empty list", [] { hstack({}); }, {"hstack", "non-empty"}},
                {"an undefined tensor",
                 [] {
                   hstack({ones({2}), Tensor()});
                 },
                 {"hstack", "undefined"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = moving(
        "vstack", {shapes("[4], [1, 4], [3, 4]", {{4}, {1, 4}, {3, 4}}, 3161), shapes("0-d and [1]", {{}, {1}}, 3164)},
        [](const TensorList& x) { return TensorList{vstack(x)}; },
        [rank_at_least](const TensorList& x) {
          return TensorList{ref_join(x, rank_at_least(2, {0, 0}), 0)};
        },
        {0, 1});
    r.errors = {{"columns that differ", [] { vstack({ones({2, 3}), ones({4})}); }, {"vstack", "[1, 4]", "[2, 3]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = moving(
        "dstack",
        {shapes("[3], [1, 3], [1, 3, 2]", {{3}, {1, 3}, {1, 3, 2}}, 3171),
         shapes("[2, 3] twice", {{2, 3}, {2, 3}}, 3174)},
        [](const TensorList& x) { return TensorList{dstack(x)}; },
        [](const TensorList& x) {
          auto shaped = [](const Tensor& t) {
            Shape s = t.sizes();
            if (s.empty()) return Shape{1, 1, 1};
            if (s.size() == 1) return Shape{1, s[0], 1};
            if (s.size() == 2) s.push_back(1);
            return s;
          };
          return TensorList{ref_join(x, shaped, 2)};
        },
        {0, 1});
    r.errors = {{"planes that differ",
                 [] {
                   dstack({ones({2, 3}), ones({2, 4})});
                 },
                 {"dstack", "[2, 3, 1]", "[2, 4, 1]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = moving(
        "column_stack", {shapes("[3], [3, 2], [3]", {{3}, {3, 2}, {3}}, 3181), shapes("0-d twice", {{}, {}}, 3184)},
        [](const TensorList& x) { return TensorList{column_stack(x)}; },
        [](const TensorList& x) {
          return TensorList{ref_join(
              x,
              [](const Tensor& t) {
                return t.dim() <= 1 ? Shape{t.numel(), 1} : t.sizes();
              },
              1)};
        },
        {0, 1});
    r.errors = {{"columns of other lengths",
                 [] {
                   column_stack({ones({3}), ones({2})});
                 },
                 {"column_stack", "[3, 1]", "[2, 1]"}}};
    rows.push_back(std::move(r));
  }
}

void add_splits_and_flips(std::vector<OpRow>& rows) {
  {
    // 7 along dim 2 in 3 pieces: 3, 2, 2; in 9: seven of 1 and two empty.
    for (int64_t sections : {3, 9}) {
      OpRow r = moving(
          "tensor_split " + std::to_string(sections) + " along dim 2", one_input_samples(3191),
          [sections](const TensorList& x) { return tensor_split(x[0], sections, 2); },
          [sections](const TensorList& x) {
            const int64_t n = x[0].size(2);
            std::vector<std::pair<int64_t, int64_t>> bounds;
            int64_t start = 0;
            for (int64_t k = 0; k < sections; ++k) {
              const int64_t length = n / sections + (k < n % sections ? 1 : 0);
              bounds.emplace_back(start, start + length);
              start += length;
            }
            return ref_pieces(x[0], bounds, 2);
          });
      if (sections == 3) {
        r.errors = {{"no sections", [] { tensor_split(ones({4}), 0); }, {"tensor_split", "sections", "0"}},
                    {"a 0-d input", [] { tensor_split(scalar_tensor(1.0), 2); }, {"tensor_split", "0-d"}},
                    {"dim out of range", [] { tensor_split(ones({4}), 2, 1); }, {"tensor_split", "dim 1", "[4]"}}};
      }
      rows.push_back(std::move(r));
    }
  }
  {
    // Python slice bounds: -2 counts from the end, 9 clamps to the size, and 1 after them gives an
    // empty piece (its end before its start) and a last piece from 1.
    const std::vector<int64_t> indices{2, -2, 9, 1};
    OpRow r = moving(
        "tensor_split_at {2, -2, 9, 1} along dim 0", one_input_samples(3201),
        [indices](const TensorList& x) { return tensor_split_at(x[0], indices, 0); },
        [indices](const TensorList& x) {
          const int64_t n = x[0].size(0);
          auto bound = [n](int64_t i) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); };
          std::vector<std::pair<int64_t, int64_t>> bounds;
          int64_t previous = 0;
          for (int64_t i : indices) {
            bounds.emplace_back(bound(previous), std::max(bound(previous), bound(i)));
            previous = i;
          }
          bounds.emplace_back(bound(previous), n);
          return ref_pieces(x[0], bounds, 0);
        });
    r.errors = {{"a 0-d input", [] { tensor_split_at(scalar_tensor(1.0), {1}); }, {"tensor_split_at", "0-d"}}};
    rows.push_back(std::move(r));
  }
  // fliplr reverses dim 1, flipud dim 0.
  for (int64_t dim : {1, 0}) {
    OpRow r = moving(
        dim == 1 ? "fliplr" : "flipud", one_input_samples(3211 + dim),
        [dim](const TensorList& x) { return TensorList{dim == 1 ? fliplr(x[0]) : flipud(x[0])}; },
        [dim](const TensorList& x) {
          return TensorList{ref_pick(x[0], x[0].sizes(), [&x, dim](Shape i) {
            i[at(dim)] = x[0].size(dim) - 1 - i[at(dim)];
            return i;
          })};
        });
    if (dim == 1) {
      r.errors = {{"a 1-d input", [] { fliplr(ones({3})); }, {"fliplr", "2 dims", "[3]"}}};
    } else {
      r.errors = {{"a 0-d input", [] { flipud(scalar_tensor(1.0)); }, {"flipud", "0-d"}}};
    }
    rows.push_back(std::move(r));
  }
}

}  // namespace

void add_join_rows(std::vector<OpRow>& rows) {
  add_tile_and_interleave(rows);
  add_stacks(rows);
  add_splits_and_flips(rows);
}

}  // namespace kiln::test
