// Op table rows of the view family: view, reshape, permute, transpose, narrow, slice, select,
// expand, squeeze, unsqueeze, flatten, contiguous, clone, movedim, unflatten, unbind, meshgrid and
// unfold (sliding windows, overlapping and not). References relabel or pick values with
// plain index arithmetic; view checks that it shares the input's storage, clone that it does not.
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// The same values in row-major order under another shape (view, reshape, flatten, squeeze, ...).
Tensor ref_relabel(const Tensor& x, const Shape& shape) { return from_values(values(x), shape); }

}  // namespace

void add_view_rows(std::vector<OpRow>& rows) {
  {
    // Merging dims 0 and 1 is a view even of the non-contiguous sample (its dims 0 and 1 are packed).
    std::vector<Sample> s = {
        {"3x5x7", [](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, 1700)}; }},
        {"non-contiguous 3x5x9", [](DType t, Device d) { return TensorList{noncontig(rnd({3, 5, 9}, t, d, 1701))}; }},
    };
    OpRow r = unary_row(
        "view", s,
        [](const Tensor& x) {
          Tensor y = view(x, {x.size(0) * x.size(1), -1});
          if (!y.is_view() || y.storage() != x.storage()) {
            throw Error("view: result does not share the input's storage");
          }
          return y;
        },
        [](const Tensor& x) { return ref_relabel(x, {x.size(0) * x.size(1), x.size(2)}); });
    r.errors = {
        {"wrong element count", [] { view(zeros({3, 5}), {4, 4}); }, {"view", "[4, 4]", "[3, 5]"}},
        {"strides not viewable", [] { view(zeros({5, 3}).t(), {-1}); }, {"view", "[3, 5]", "reshape"}},
        {"two -1", [] { view(zeros({3, 5}), {-1, -1}); }, {"view", "[-1, -1]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // The transposed and non-contiguous samples cannot be viewed as [last, -1]: reshape must copy.
    OpRow r = unary_row(
        "reshape", one_input_samples(1710), [](const Tensor& x) { return reshape(x, {x.size(-1), -1}); },
        [](const Tensor& x) { return ref_relabel(x, {x.size(-1), x.numel() / x.size(-1)}); });
    r.errors = {
        {"wrong element count", [] { reshape(zeros({3, 5}), {4, -1}); }, {"reshape", "[4, -1]", "[3, 5]"}},
        {"negative size", [] { reshape(zeros({3, 5}), {-3, 5}); }, {"reshape", "-3"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "permute", one_input_samples(1720), [](const Tensor& x) { return permute(x, {2, 0, -2}); },
        [](const Tensor& x) {
          const Shape& s = x.sizes();
          return ref_pick(x, {s[2], s[0], s[1]}, [](const Shape& o) { return Shape{o[1], o[2], o[0]}; });
        });
    r.errors = {
        {"wrong dim count", [] { permute(zeros({2, 3, 4}), {1, 0}); }, {"permute", "[2, 3, 4]"}},
        {"repeated dim", [] { permute(zeros({2, 3, 4}), {0, -3, 1}); }, {"permute", "[0, -3, 1]"}},
        {"dim out of range", [] { permute(zeros({2, 3}), {0, 2}); }, {"permute", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "transpose", one_input_samples(1730), [](const Tensor& x) { return transpose(x, 0, -1); },
        [](const Tensor& x) {
          const Shape& s = x.sizes();
          return ref_pick(x, {s[2], s[1], s[0]}, [](const Shape& o) { return Shape{o[2], o[1], o[0]}; });
        });
    r.errors = {{"dim out of range", [] { transpose(zeros({2, 3}), 0, 2); }, {"transpose", "dimension 2", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "narrow", one_input_samples(1740), [](const Tensor& x) { return narrow(x, -1, 1, 2); },
        [](const Tensor& x) {
          Shape s = x.sizes();
          s[2] = 2;
          return ref_pick(x, s, [](Shape o) {
            o[2] += 1;
            return o;
          });
        });
    r.errors = {
        {"range past the end", [] { narrow(zeros({3, 5}), 1, 3, 4); }, {"narrow", "[3, 7)", "size 5", "[3, 5]"}},
        {"negative length", [] { narrow(zeros({3, 5}), 0, 1, -1); }, {"narrow", "[1, 0)", "size 3"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Start 1, end past the size (clamped), step 2: elements 1, 3, ... of the last dim.
    OpRow r = unary_row(
        "slice_step2", one_input_samples(1750), [](const Tensor& x) { return x.slice(-1, 1, 100, 2); },
        [](const Tensor& x) {
          Shape s = x.sizes();
          s[2] = s[2] / 2;
          return ref_pick(x, s, [](Shape o) {
            o[2] = 1 + 2 * o[2];
            return o;
          });
        });
    r.errors = {
        {"zero step", [] { zeros({3, 5}).slice(1, 0, 5, 0); }, {"slice", "step", "0"}},
        {"dim out of range", [] { zeros({3, 5}).slice(2, 0, 1); }, {"slice", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Negative start and end count from the size: elements size-3 and size-2 of dim 1.
    OpRow r = unary_row(
        "slice_negative_bounds", one_input_samples(1760), [](const Tensor& x) { return x.slice(1, -3, -1); },
        [](const Tensor& x) {
          Shape s = x.sizes();
          int64_t start = s[1] - 3;
          s[1] = 2;
          return ref_pick(x, s, [start](Shape o) {
            o[1] += start;
            return o;
          });
        });
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "select_neg", one_input_samples(1770), [](const Tensor& x) { return select(x, 1, -2); },
        [](const Tensor& x) {
          const Shape& s = x.sizes();
          int64_t i = s[1] - 2;
          return ref_pick(x, {s[0], s[2]}, [i](const Shape& o) { return Shape{o[0], i, o[1]}; });
        });
    r.errors = {
        {"index out of range", [] { select(zeros({3, 5}), 1, 5); }, {"select", "index 5", "size 5", "[3, 5]"}},
        {"negative index out of range", [] { select(zeros({3, 5}), 0, -4); }, {"select", "index -4", "size 3"}},
        {"0-d input", [] { select(zeros({}), 0, 0); }, {"select", "0-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = {
        {"3x1x7", [](DType t, Device d) { return TensorList{rnd({3, 1, 7}, t, d, 1780)}; }},
        {"non-contiguous 3x1x9", [](DType t, Device d) { return TensorList{noncontig(rnd({3, 1, 9}, t, d, 1781))}; }},
        {"1x1x1", [](DType t, Device d) { return TensorList{rnd({1, 1, 1}, t, d, 1782)}; }},
    };
    // A new leading dim of 2, dim 1 broadcast to 5, the others kept with -1.
    OpRow r = unary_row(
        "expand", s, [](const Tensor& x) { return expand(x, {2, -1, 5, -1}); },
        [](const Tensor& x) {
          const Shape& xs = x.sizes();
          return ref_pick(x, {2, xs[0], 5, xs[2]}, [](const Shape& o) { return Shape{o[1], 0, o[3]}; });
        });
    r.errors = {
        {"size not 1", [] { expand(zeros({3, 2}), {3, 4}); }, {"expand", "[3, 2]", "[3, 4]"}},
        {"fewer dims", [] { expand(zeros({3, 2}), {2}); }, {"expand", "[3, 2]", "[2]"}},
        {"-1 in a new dim", [] { expand(zeros({3}), {-1, 3}); }, {"expand", "[-1, 3]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = {
        {"3x1x5x1", [](DType t, Device d) { return TensorList{rnd({3, 1, 5, 1}, t, d, 1790)}; }},
        {"non-contiguous 1x5x1x7",
         [](DType t, Device d) { return TensorList{noncontig(rnd({1, 5, 1, 7}, t, d, 1791))}; }},
        {"nothing to squeeze 3x5", [](DType t, Device d) { return TensorList{rnd({3, 5}, t, d, 1792)}; }},
    };
    OpRow r = unary_row(
        "squeeze", s, [](const Tensor& x) { return squeeze(x); },
        [](const Tensor& x) {
          Shape ns;
          for (int64_t v : x.sizes())
            if (v != 1) ns.push_back(v);
          return ref_relabel(x, ns);
        });
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = {
        {"3x1x5x1", [](DType t, Device d) { return TensorList{rnd({3, 1, 5, 1}, t, d, 1800)}; }},
        {"last not 1: unchanged 3x5x7",
         [](DType t, Device d) { return TensorList{noncontig(rnd({3, 5, 7}, t, d, 1801))}; }},
    };
    OpRow r = unary_row(
        "squeeze_dimneg1", s, [](const Tensor& x) { return squeeze(x, -1); },
        [](const Tensor& x) {
          Shape ns = x.sizes();
          if (ns.back() == 1) ns.pop_back();
          return ref_relabel(x, ns);
        });
    r.errors = {{"dim out of range", [] { squeeze(zeros({3, 1}), 2); }, {"squeeze", "dimension 2", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "unsqueeze_dim1", one_input_samples(1810), [](const Tensor& x) { return unsqueeze(x, 1); },
        [](const Tensor& x) {
          Shape ns = x.sizes();
          ns.insert(ns.begin() + 1, 1);
          return ref_relabel(x, ns);
        });
    r.errors = {{"dim out of range", [] { unsqueeze(zeros({3, 1}), 3); }, {"unsqueeze", "dimension 3"}}};
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1820);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 1823)}; }});
    OpRow r = unary_row(
        "unsqueeze_dimneg1", s, [](const Tensor& x) { return unsqueeze(x, -1); },
        [](const Tensor& x) {
          Shape ns = x.sizes();
          ns.push_back(1);
          return ref_relabel(x, ns);
        });
    r.errors = {{"negative dim out of range", [] { unsqueeze(zeros({3, 1}), -4); }, {"unsqueeze", "dimension -4"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "flatten_dims1to2", one_input_samples(1830), [](const Tensor& x) { return flatten(x, 1, -1); },
        [](const Tensor& x) { return ref_relabel(x, {x.size(0), x.size(1) * x.size(2)}); });
    r.errors = {
        {"start after end", [] { flatten(zeros({2, 3, 4}), 2, 1); }, {"flatten", "start_dim 2", "end_dim 1"}},
        {"dim out of range", [] { flatten(zeros({2, 3}), 0, 2); }, {"flatten", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1840);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 1843)}; }});
    OpRow r = unary_row(
        "flatten_all", s, [](const Tensor& x) { return flatten(x); },
        [](const Tensor& x) { return ref_relabel(x, {x.numel()}); });
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1850);
    s.push_back({"transposed last two 3x7x5",
                 [](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, 1853).transpose(1, 2)}; }});
    OpRow r = unary_row(
        "contiguous", s,
        [](const Tensor& x) {
          Tensor y = contiguous(x);
          if (!y.is_contiguous()) throw Error("contiguous: result is not contiguous");
          return y;
        },
        [](const Tensor& x) { return ref_relabel(x, x.sizes()); });
    r.errors = {{"undefined tensor", [] { contiguous(Tensor()); }, {"contiguous", "undefined"}}};
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1860);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 1863)}; }});
    OpRow r = unary_row(
        "clone", s,
        [](const Tensor& x) {
          Tensor y = x.clone();
          if (y.storage() == x.storage()) throw Error("clone: result shares the input's storage");
          return y;
        },
        [](const Tensor& x) { return ref_relabel(x, x.sizes()); });
    r.errors = {{"undefined tensor", [] { Tensor().clone(); }, {"clone", "undefined"}}};
    rows.push_back(std::move(r));
  }
  {
    // Dims 0 and 2 to the front and back the other way: [a, b, c] -> [c, b, a]... by movedim.
    OpRow r = unary_row(
        "movedim", one_input_samples(1870),
        [](const Tensor& x) {
          return movedim(x, {0, -1}, {2, 0});
        },
        [](const Tensor& x) {
          return ref_pick(x, {x.size(2), x.size(1), x.size(0)}, [](const Shape& i) { return Shape{i[2], i[1], i[0]}; });
        });
    r.errors = {
        {"lengths differ",
         [] {
           movedim(zeros({2, 3}), {0}, {1, 0});
         },
         {"movedim", "[0]", "[1, 0]"}},
        {"a dim twice",
         [] {
           movedim(zeros({2, 3}), {0, 0}, {0, 1});
         },
         {"movedim", "repeats"}},
        {"dim out of range",
         [] {
           movedim(zeros({2, 3}), 2, 0);
         },
         {"movedim", "dimension 2"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "unflatten", one_input_samples(1880),
        [](const Tensor& x) {
          return unflatten(x, 1, {1, -1, 1});
        },
        [](const Tensor& x) {
          return ref_relabel(x, {x.size(0), 1, x.size(1), 1, x.size(2)});
        });
    r.errors = {
        {"sizes that do not multiply to the dim",
         [] {
           unflatten(zeros({2, 6}), 1, {4, -1});
         },
         {"unflatten", "[4, -1]"}},
        {"0-d input", [] { unflatten(zeros({}), 0, {1}); }, {"unflatten", "0-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // The slices along dim 1 (5 of them) as separate outputs.
    OpRow r = unary_row(
        "unbind dim1", one_input_samples(1890), [](const Tensor& x) { return x; }, [](const Tensor& x) { return x; });
    r.op = [](const TensorList& x) { return unbind(x[0], 1); };
    r.reference = [](const TensorList& x) {
      TensorList out;
      for (int64_t k = 0; k < x[0].size(1); ++k) {
        out.push_back(ref_pick(x[0], {x[0].size(0), x[0].size(2)}, [k](const Shape& i) {
          return Shape{i[0], k, i[1]};
        }));
      }
      return out;
    };
    r.errors = {{"0-d input", [] { unbind(zeros({})); }, {"unbind", "0-d"}}};
    rows.push_back(std::move(r));
  }
  {
    // Three 1-d inputs in both indexings; Xy puts input 0 along dim 1.
    OpRow r;
    r.name = "meshgrid ij and xy";
    r.dtypes = kAllNumeric;
    r.samples = {{"3, 4 and 2", [](DType t, Device d) {
                    return TensorList{rnd({3}, t, d, 1900), noncontig(rnd({4}, t, d, 1901)), rnd({2}, t, d, 1902)};
                  }}};
    r.op = [](const TensorList& x) {
      TensorList out = meshgrid(x, MeshIndexing::Ij);
      for (const Tensor& t : meshgrid(x, MeshIndexing::Xy)) out.push_back(t);
      return out;
    };
    r.reference = [](const TensorList& x) {
      const Shape ij{3, 4, 2}, xy{4, 3, 2};
      TensorList out;
      for (int64_t k = 0; k < 3; ++k) out.push_back(ref_pick(x[k], ij, [k](const Shape& i) { return Shape{i[k]}; }));
      const int64_t xy_dim[3] = {1, 0, 2};
      for (int64_t k = 0; k < 3; ++k) {
        const int64_t dim = xy_dim[k];
        out.push_back(ref_pick(x[k], xy, [dim](const Shape& i) { return Shape{i[dim]}; }));
      }
      return out;
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = same_dtype;
    r.errors = {
        {"a 2-d input",
         [] {
           meshgrid({zeros({2}), zeros({2, 2})});
         },
         {"meshgrid", "input 1", "[2, 2]"}},
        {"dtypes differ",
         [] {
           meshgrid({zeros({2}), zeros({2}, DType::Int64)});
         },
         {"meshgrid", "int64"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Windows of 3 along dim 2 (size 7, or 9 non-contiguous): step 2 (overlapping, gradients add)
    // and step 3 (disjoint, the last element of 7 left out).
    OpRow r = unary_row(
        "unfold", one_input_samples(1910), [](const Tensor& x) { return x.unfold(2, 3, 2); },
        [](const Tensor& x) { return x; });
    r.op = [](const TensorList& x) { return TensorList{x[0].unfold(2, 3, 2), x[0].unfold(-1, 3, 3)}; };
    r.reference = [](const TensorList& x) {
      TensorList out;
      for (const int64_t step : {int64_t{2}, int64_t{3}}) {
        const Tensor& t = x[0];
        const int64_t windows = (t.size(2) - 3) / step + 1;
        out.push_back(ref_pick(t, {t.size(0), t.size(1), windows, 3}, [step](const Shape& i) {
          return Shape{i[0], i[1], i[2] * step + i[3]};
        }));
      }
      return out;
    };
    r.errors = {
        {"window past the dim",
         [] {
           zeros({2, 3}).unfold(1, 4, 1);
         },
         {"unfold", "size 4", "3"}},
        {"step 0",
         [] {
           zeros({2, 3}).unfold(1, 2, 0);
         },
         {"unfold", "step"}},
        {"0-d input", [] { zeros({}).unfold(0, 1, 1); }, {"unfold", "0-d"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
