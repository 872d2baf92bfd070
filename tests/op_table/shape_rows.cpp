// Op table rows of the shape family: joining and splitting (cat, stack, split, chunk), and moving
// values (flip, roll, repeat, pad in its four modes, the pixel and channel shuffles). References
// move values with plain index arithmetic (unravel/ravel); 1-d empty tensors join as cat's legacy
// rule says (skipped whatever the others' shape).
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Tensors joined along dim (1-d empty tensors skipped, as cat does).
Tensor ref_cat(const TensorList& xs, int64_t dim) {
  std::vector<const Tensor*> used;
  for (const Tensor& t : xs)
    if (!(t.dim() == 1 && t.numel() == 0)) used.push_back(&t);
  int64_t d = wrap(dim, used[0]->dim());
  Shape os = used[0]->sizes();
  os[at(d)] = 0;
  for (const Tensor* t : used) os[at(d)] += t->size(d);
  std::vector<double> out(at(shape_numel(os)));
  int64_t off = 0;
  for (const Tensor* t : used) {
    std::vector<double> tv = values(*t);
    for (int64_t i = 0; i < t->numel(); ++i) {
      Shape idx = unravel(i, t->sizes());
      idx[at(d)] += off;
      out[at(ravel(idx, os))] = tv[at(i)];
    }
    off += t->size(d);
  }
  return from_values(out, os);
}

Tensor ref_stack(const TensorList& xs, int64_t dim) {
  int64_t d = wrap(dim, xs[0].dim() + 1);
  Shape os = xs[0].sizes();
  os.insert(os.begin() + d, static_cast<int64_t>(xs.size()));
  std::vector<double> out(at(shape_numel(os)));
  for (size_t k = 0; k < xs.size(); ++k) {
    std::vector<double> tv = values(xs[k]);
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      Shape idx = unravel(i, xs[k].sizes());
      idx.insert(idx.begin() + d, static_cast<int64_t>(k));
      out[at(ravel(idx, os))] = tv[at(i)];
    }
  }
  return from_values(out, os);
}

// Pieces of x along dim with the given sizes.
TensorList ref_pieces(const Tensor& x, const Shape& sizes, int64_t dim) {
  int64_t d = wrap(dim, x.dim());
  TensorList out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    Shape ps = x.sizes();
    ps[at(d)] = s;
    out.push_back(ref_pick(x, ps, [d, off](Shape idx) {
      idx[at(d)] += off;
      return idx;
    }));
    off += s;
  }
  return out;
}

Shape split_sizes(int64_t n, int64_t size) {
  Shape s;
  for (int64_t off = 0; off < n; off += size) s.push_back(std::min(size, n - off));
  return s;
}

OpRow cat_row(const std::string& name, int64_t dim, uint64_t seed) {
  const Shape base{3, 5, 7};
  int64_t d = wrap(dim, 3);
  Shape other = base;
  other[at(d)] = 4;
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = {
      {"3x5x7 and 4 along dim",
       [=](DType t, Device dv) { return TensorList{rnd(base, t, dv, seed), rnd(other, t, dv, seed + 1)}; }},
      {"non-contiguous first",
       [=](DType t, Device dv) {
         return TensorList{noncontig(rnd(base, t, dv, seed + 2)), rnd(other, t, dv, seed + 3)};
       }},
      {"transposed second",
       [=](DType t, Device dv) {
         Shape o = other;
         std::swap(o[0], o[2]);
         return TensorList{rnd(base, t, dv, seed + 4), rnd(o, t, dv, seed + 5).transpose(0, 2)};
       }},
  };
  r.op = [dim](const TensorList& x) { return TensorList{cat(x, dim)}; };
  r.reference = [dim](const TensorList& x) { return TensorList{ref_cat(x, dim)}; };
  r.differentiable = {0, 1};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"sizes differ outside dim", [dim] { cat({zeros({2, 3, 4}), zeros({2, 5, 5})}, dim); },
       {"cat", "[2, 3, 4]", "[2, 5, 5]"}},
      {"dim out of range", [] { cat({zeros({2, 3}), zeros({2, 3})}, 2); }, {"cat", "dimension 2", "2-d"}},
  };
  return r;
}

OpRow stack_row(const std::string& name, int64_t dim, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = {
      {"three 3x5x7, one non-contiguous",
       [=](DType t, Device d) {
         return TensorList{rnd({3, 5, 7}, t, d, seed), noncontig(rnd({3, 5, 7}, t, d, seed + 1)),
                           rnd({3, 5, 7}, t, d, seed + 2)};
       }},
      {"three 0-d",
       [=](DType t, Device d) {
         return TensorList{rnd({}, t, d, seed + 3), rnd({}, t, d, seed + 4), rnd({}, t, d, seed + 5)};
       }},
      {"three 1-d 5, one a strided select",
       [=](DType t, Device d) {
         return TensorList{rnd({5}, t, d, seed + 6), rnd({5, 2}, t, d, seed + 7).select(1, 1),
                           rnd({5}, t, d, seed + 8)};
       }},
  };
  r.op = [dim](const TensorList& x) { return TensorList{stack(x, dim)}; };
  r.reference = [dim](const TensorList& x) { return TensorList{ref_stack(x, dim)}; };
  r.differentiable = {0, 1, 2};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"shapes differ", [dim] { stack({zeros({2, 3}), zeros({3, 2})}, dim); }, {"stack", "[2, 3]", "[3, 2]"}},
      {"dim out of range", [] { stack({zeros({2, 3}), zeros({2, 3})}, 4); }, {"stack", "dimension 4"}},
      {"empty list", [] { stack({}, 0); }, {"stack", "non-empty"}},
  };
  return r;
}

OpRow split_row(const std::string& name, int64_t size, int64_t dim, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = one_input_samples(seed);
  r.op = [size, dim](const TensorList& x) { return split(x[0], size, dim); };
  r.reference = [size, dim](const TensorList& x) { return ref_pieces(x[0], split_sizes(x[0].size(dim), size), dim); };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"split_size zero", [dim] { split(zeros({3, 4}), 0, dim); }, {"split", "positive", "0"}},
      {"dim out of range", [size] { split(zeros({3, 4}), size, 2); }, {"split", "dimension 2", "2-d"}},
  };
  return r;
}

OpRow chunk_row(const std::string& name, int64_t chunks, int64_t dim, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = one_input_samples(seed);
  r.op = [chunks, dim](const TensorList& x) { return chunk(x[0], chunks, dim); };
  // PyTorch's rule: pieces of ceil(n / chunks), so there may be fewer than `chunks` pieces.
  r.reference = [chunks, dim](const TensorList& x) {
    int64_t n = x[0].size(dim);
    return ref_pieces(x[0], split_sizes(n, (n + chunks - 1) / chunks), dim);
  };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"zero chunks", [dim] { chunk(zeros({3, 4}), 0, dim); }, {"chunk", "positive", "0"}},
      {"dim out of range", [chunks] { chunk(zeros({3, 4}), chunks, -3); }, {"chunk", "dimension -3", "2-d"}},
  };
  return r;
}

// A row of a one-input op that moves values (flip, roll, repeat, pad): every numeric dtype, the
// usual 3-d samples (odd sizes, non-contiguous, permuted), gradients through index_select / cat.
OpRow moving_row(const std::string& name, std::function<Tensor(const Tensor&)> op,
                 std::function<Tensor(const Tensor&)> reference, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = one_input_samples(seed);
  r.op = [op](const TensorList& x) { return TensorList{op(x[0])}; };
  r.reference = [reference](const TensorList& x) { return TensorList{reference(x[0])}; };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  // Values are moved (or filled), never computed: exact in every dtype.
  for (DType t : kAllNumeric) r.tolerance[t] = {0, 0};
  return r;
}

// pad's reference: out[i] reads x at each padded dim's source position (or is `value`).
Tensor ref_pad(const Tensor& x, const Shape& pads, PadMode mode, double value) {
  Shape os = x.sizes();
  const size_t pairs = pads.size() / 2;
  for (size_t k = 0; k < pairs; ++k) os[os.size() - 1 - k] += pads[2 * k] + pads[2 * k + 1];
  const Values xv = values(x);
  Values out;
  for (int64_t o = 0; o < shape_numel(os); ++o) {
    Shape idx = unravel(o, os);
    bool filled = false;
    for (size_t k = 0; k < pairs; ++k) {
      const size_t d = os.size() - 1 - k;
      const int64_t n = x.size(static_cast<int64_t>(d)), i = idx[d] - pads[2 * k];
      int64_t j = i;
      if (mode == PadMode::Constant && (i < 0 || i >= n)) filled = true;
      if (mode == PadMode::Reflect) j = i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
      if (mode == PadMode::Replicate) j = std::clamp<int64_t>(i, 0, n - 1);
      if (mode == PadMode::Circular) j = ((i % n) + n) % n;
      idx[d] = j;
    }
    out.push_back(filled ? value : xv[at(ravel(idx, x.sizes()))]);
  }
  return from_values(out, os);
}

}  // namespace

void add_shape_rows(std::vector<OpRow>& rows) {
  // --- pixel_shuffle, pixel_unshuffle, channel_shuffle -----------------------------------------
  {
    auto sample = [](const Shape& s, uint64_t seed, bool strided) {
      return Sample{(strided ? "non-contiguous " : "") + shape_str(s), [=](DType t, Device d) {
                      const Tensor x = rnd(s, t, d, seed);
                      return TensorList{strided ? noncontig(x) : x};
                    }};
    };
    OpRow r = moving_row(
        "pixel_shuffle 2", [](const Tensor& x) { return pixel_shuffle(x, 2); },
        [](const Tensor& x) {
          Shape os = x.sizes();
          const size_t c = os.size() - 3;
          os[c] /= 4;
          os[c + 1] *= 2;
          os[c + 2] *= 2;
          return ref_pick(x, os, [c](Shape i) {
            const int64_t h = i[c + 1], w = i[c + 2];
            i[c] = i[c] * 4 + (h % 2) * 2 + (w % 2);
            i[c + 1] = h / 2;
            i[c + 2] = w / 2;
            return i;
          });
        },
        1280);
    r.samples = {sample({2, 8, 3, 5}, 1281, false), sample({12, 2, 3}, 1282, true),
                 sample({2, 2, 4, 1, 2}, 1283, false)};
    r.errors = {{"channels not divisible by r^2",
                 [] {
                   pixel_shuffle(zeros({1, 6, 2, 2}), 2);
                 },
                 {"pixel_shuffle", "6 channels", "4", "[1, 6, 2, 2]"}},
                {"2-d input",
                 [] {
                   pixel_shuffle(zeros({4, 4}), 2);
                 },
                 {"pixel_shuffle", "[4, 4]"}},
                {"factor 0",
                 [] {
                   pixel_shuffle(zeros({1, 4, 2, 2}), 0);
                 },
                 {"pixel_shuffle", "factor", "0"}}};
    rows.push_back(std::move(r));
    OpRow u = moving_row(
        "pixel_unshuffle 3", [](const Tensor& x) { return pixel_unshuffle(x, 3); },
        [](const Tensor& x) {
          Shape os = x.sizes();
          const size_t c = os.size() - 3;
          os[c] *= 9;
          os[c + 1] /= 3;
          os[c + 2] /= 3;
          return ref_pick(x, os, [c](Shape i) {
            const int64_t k = i[c];
            i[c] = k / 9;
            i[c + 1] = i[c + 1] * 3 + (k % 9) / 3;
            i[c + 2] = i[c + 2] * 3 + k % 3;
            return i;
          });
        },
        1290);
    u.samples = {sample({2, 2, 6, 3}, 1291, false), sample({3, 3, 9}, 1292, true)};
    u.errors = {{"height not divisible",
                 [] {
                   pixel_unshuffle(zeros({1, 1, 4, 6}), 3);
                 },
                 {"pixel_unshuffle", "height 4", "3", "[1, 1, 4, 6]"}}};
    rows.push_back(std::move(u));
    OpRow g = moving_row(
        "channel_shuffle 3", [](const Tensor& x) { return channel_shuffle(x, 3); },
        [](const Tensor& x) {
          const int64_t per = x.size(1) / 3;
          return ref_pick(x, x.sizes(), [per](Shape i) {
            i[1] = (i[1] % 3) * per + i[1] / 3;
            return i;
          });
        },
        1295);
    g.samples = {sample({2, 6, 4}, 1296, false), sample({2, 9, 2, 3}, 1297, true)};
    g.errors = {{"groups do not divide the channels",
                 [] {
                   channel_shuffle(zeros({1, 4, 2}), 3);
                 },
                 {"channel_shuffle", "groups 3", "4 channels"}}};
    rows.push_back(std::move(g));
  }
  // --- flip, roll, repeat, pad ---------------------------------------------------------------
  {
    OpRow r = moving_row(
        "flip dims 0 and -1",
        [](const Tensor& x) {
          return flip(x, {0, -1});
        },
        [](const Tensor& x) {
          return ref_pick(x, x.sizes(), [&x](Shape i) {
            i[0] = x.size(0) - 1 - i[0];
            i[2] = x.size(2) - 1 - i[2];
            return i;
          });
        },
        1300);
    r.errors = {
        {"a dim named twice",
         [] {
           flip(zeros({2, 3}), {1, -1});
         },
         {"flip", "dim 1", "more than once", "[1, -1]"}},
        {"dim out of range",
         [] {
           flip(zeros({2, 3}), {2});
         },
         {"flip", "2"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = moving_row(
        "roll shifts 2 and -4 along dims 1 and 2",
        [](const Tensor& x) {
          return roll(x, {2, -4}, {1, 2});
        },
        [](const Tensor& x) {
          return ref_pick(x, x.sizes(), [&x](Shape i) {
            i[1] = ((i[1] - 2) % x.size(1) + x.size(1)) % x.size(1);
            i[2] = ((i[2] + 4) % x.size(2) + x.size(2)) % x.size(2);
            return i;
          });
        },
        1310);
    r.errors = {
        {"shifts and dims of different lengths",
         [] {
           roll(zeros({2, 3}), {1, 2}, {0});
         },
         {"roll", "2 shifts", "1 dims"}},
        {"two shifts without dims",
         [] {
           roll(zeros({2, 3}), {1, 2});
         },
         {"roll", "one shift"}},
    };
    rows.push_back(std::move(r));
  }
  rows.push_back(moving_row(
      "roll flattened by 5", [](const Tensor& x) { return roll(x, {5}); },
      [](const Tensor& x) {
        const Values v = values(x);
        Values out(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[(i + 5) % v.size()] = v[i];
        return from_values(out, x.sizes());
      },
      1320));
  {
    OpRow r = moving_row(
        "repeat 2, 1, 3, 2 (a new leading dim)",
        [](const Tensor& x) {
          return repeat(x, {2, 1, 3, 2});
        },
        [](const Tensor& x) {
          const Shape os{2, x.size(0), 3 * x.size(1), 2 * x.size(2)};
          return ref_pick(x, os, [&x](const Shape& i) {
            return Shape{i[1] % x.size(0), i[2] % x.size(1), i[3] % x.size(2)};
          });
        },
        1330);
    r.errors = {
        {"fewer repeats than dims",
         [] {
           repeat(zeros({2, 3}), {2});
         },
         {"repeat", "1 repeats", "2-d", "[2, 3]"}},
        {"a negative repeat",
         [] {
           repeat(zeros({2, 3}), {1, -1});
         },
         {"repeat", ">= 0", "[1, -1]"}},
    };
    rows.push_back(std::move(r));
  }
  struct PadCase {
    const char* name;
    Shape pads;
    PadMode mode;
    double value;
  };
  for (const PadCase& c :
       {PadCase{"pad constant 1, 2 | 0, 3 with 1.5", {1, 2, 0, 3}, PadMode::Constant, 1.5},
        PadCase{"pad constant, negative: crops -1, 2 | -2, -1", {-1, 2, -2, -1}, PadMode::Constant, 0},
        PadCase{"pad reflect 2, 1 | 1, 2", {2, 1, 1, 2}, PadMode::Reflect, 0},
        PadCase{"pad replicate 3, 0 | 2, 2 | 1, 1", {3, 0, 2, 2, 1, 1}, PadMode::Replicate, 0},
        PadCase{"pad circular 2, 3", {2, 3}, PadMode::Circular, 0}}) {
    OpRow r = moving_row(
        c.name, [c](const Tensor& x) { return pad(x, c.pads, c.mode, c.value); },
        // The fill value in the input's dtype: 1.5 pads an integer tensor with 1, as in PyTorch.
        [c](const Tensor& x) {
          return ref_pad(x, c.pads, c.mode, is_floating(x.dtype()) ? c.value : std::trunc(c.value));
        },
        1340);
    if (c.mode == PadMode::Reflect) {
      r.errors = {
          {"reflect as wide as the dim",
           [] {
             pad(zeros({2, 3}), {3, 0}, PadMode::Reflect);
           },
           {"pad", "reflect", "smaller than the dim", "size 3"}},
          {"an odd number of pads",
           [] {
             pad(zeros({2, 3}), {1, 2, 3});
           },
           {"pad", "pairs", "[1, 2, 3]"}},
          {"more pairs than dims",
           [] {
             pad(zeros({3}), {1, 1, 1, 1});
           },
           {"pad", "1 dims", "[3]"}},
          {"negative reflect",
           [] {
             pad(zeros({2, 3}), {-1, 0}, PadMode::Reflect);
           },
           {"pad", "only constant"}},
          {"a crop past the dim",
           [] {
             pad(zeros({2, 3}), {-4, 0});
           },
           {"pad", "crops more", "size 3"}},
      };
    }
    rows.push_back(std::move(r));
  }

  // --- cat / stack -------------------------------------------------------------------------
  rows.push_back(cat_row("cat_dim0", 0, 1000));
  rows.push_back(cat_row("cat_dim1", 1, 1010));
  {
    OpRow r = cat_row("cat_dimneg1", -1, 1020);
    // Legacy rule (as PyTorch): 1-d empty tensors are skipped whatever the others' shape.
    r.samples.push_back({"with a 1-d empty tensor", [](DType t, Device d) {
                           return TensorList{rnd({3, 5}, t, d, 1026), zeros({0}, TensorOptions(t, d))};
                         }});
    r.errors.push_back({"different dim counts", [] { cat({zeros({2, 3}), zeros({2, 3, 1})}, -1); },
                        {"cat", "[2, 3]", "[2, 3, 1]"}});
    r.errors.push_back({"0-d inputs", [] { cat({zeros({}), zeros({})}, 0); }, {"cat", "zero-dimensional"}});
    r.errors.push_back({"empty list", [] { cat({}, 0); }, {"cat", "non-empty"}});
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "cat_three_dim1";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"3x5x7, 3x1x7 and non-contiguous 3x2x7",
         [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1030), rnd({3, 1, 7}, t, d, 1031),
                             noncontig(rnd({3, 2, 7}, t, d, 1032))};
         }},
        {"2-d 5x3, 5x7 and 5x1", [](DType t, Device d) {
           return TensorList{rnd({5, 3}, t, d, 1033), rnd({7, 5}, t, d, 1034).t(), rnd({5, 1}, t, d, 1035)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{cat(x, 1)}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_cat(x, 1)}; };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"third tensor mismatched", [] { cat({zeros({3, 2}), zeros({3, 1}), zeros({4, 1})}, 1); },
                 {"cat", "tensor 2", "[4, 1]", "[3, 2]"}}};
    rows.push_back(std::move(r));
  }
  rows.push_back(stack_row("stack_dim0", 0, 1100));
  rows.push_back(stack_row("stack_dimneg1", -1, 1110));

  // --- split / chunk -----------------------------------------------------------------------
  rows.push_back(split_row("split_size2_dim1", 2, 1, 1200));     // 5 -> 2, 2, 1
  rows.push_back(split_row("split_size4_dimneg1", 4, -1, 1210)); // 7 -> 4, 3; 9 -> 4, 4, 1; 3 -> 3
  rows.push_back(chunk_row("chunk3_dimneg1", 3, -1, 1220));      // 7 -> 3, 3, 1; 9 -> 3, 3, 3
  rows.push_back(chunk_row("chunk4_dim1", 4, 1, 1230));          // 5 -> 2, 2, 1 (three pieces)
}

}  // namespace kiln::test
