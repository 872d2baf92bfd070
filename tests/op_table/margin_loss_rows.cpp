// Op table rows of core/ops/margin_loss.h: soft margin and hinge embedding losses against labels
// of 1 and -1 (and, for the hinge, a label that is neither, which adds both terms), the multilabel
// soft margin loss with and without class weights, the multi-class margin loss (p 1 and 2, class
// weights, a [C] input) and the multilabel margin loss with lists of every length (none, a
// duplicate, all classes); each against float64 loops of torch.nn.functional's definitions.
#include <algorithm>
#include <cmath>
#include <set>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Labels [3, 4] of 1 and -1 (and 0 with `with_zero`), as int64.
Tensor labels(Device d, bool with_zero) {
  return tensor<int64_t>({1, -1, -1, 1, with_zero ? 0 : 1, 1, -1, 1, -1, with_zero ? 0 : -1, 1, -1}, {3, 4}).to(d);
}

OpRow soft_margin_row(Reduction red, bool float_labels) {
  OpRow r;
  r.name = std::string("soft_margin_loss ") + red_name(red) + (float_labels ? ", float labels" : "");
  r.dtypes = kFloatTypes;
  r.samples = {{"[3, 4]", [=](DType t, Device d) {
                  const Tensor y = labels(d, false);
                  return TensorList{rnd({3, 4}, t, d, 301, 2.0), float_labels ? y.to(t) : y};
                }}};
  r.op = [red](const TensorList& x) { return TensorList{soft_margin_loss(x[0], x[1], red)}; };
  r.reference = [red](const TensorList& x) {
    return TensorList{reduce_ref(values(ref_map(x, [](const Values& v) { return std::log1p(std::exp(-v[1] * v[0])); })),
                                 {3, 4}, red)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

OpRow hinge_row(Reduction red, double margin) {
  OpRow r;
  r.name = std::string("hinge_embedding_loss ") + red_name(red) + ", margin " + num_str(margin);
  r.dtypes = kFloatTypes;
  r.samples = {{"[3, 4], labels 1, -1 and 0", [=](DType t, Device d) {
                  return TensorList{avoiding({margin}, 0.05, 1.5)({3, 4}, t, d, 311), labels(d, true)};
                }}};
  r.op = [=](const TensorList& x) { return TensorList{hinge_embedding_loss(x[0], x[1], margin, red)}; };
  r.reference = [=](const TensorList& x) {
    return TensorList{reduce_ref(values(ref_map(x,
                                                [margin](const Values& v) {
                                                  const double hinge = std::max(0.0, margin - v[0]);
                                                  return v[1] == 1 ? v[0] : v[1] == -1 ? hinge : v[0] + hinge;
                                                })),
                                 {3, 4}, red)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

// multilabel_soft_margin_loss of logits `shape` ([N, C] or [C]) against 0/1 labels.
OpRow multilabel_soft_row(const std::string& name, const Shape& shape, bool weighted, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{shape_str(shape), [=](DType t, Device d) {
                  const Tensor y = gt(rnd(shape, DType::Float64, Device::cpu(), seed + 1), 0.0).to(t).to(d);
                  TensorList in{rnd(shape, t, d, seed, 2.0), y};
                  if (weighted) in.push_back(rnd_range({shape.back()}, t, d, seed + 2, 0.3, 2.0));
                  return in;
                }}};
  r.op = [=](const TensorList& x) {
    return TensorList{multilabel_soft_margin_loss(x[0], x[1], weighted ? x[2] : Tensor(), red)};
  };
  r.reference = [=](const TensorList& x) {
    const Values in = values(x[0]), y = values(x[1]);
    const size_t classes = static_cast<size_t>(shape.back());
    const Values w = weighted ? values(x[2]) : Values(classes, 1.0);
    Values l;
    for (size_t row = 0; row < in.size() / classes; ++row) {
      double s = 0;
      for (size_t c = 0; c < classes; ++c) {
        const size_t i = row * classes + c;
        s -= w[c] * (y[i] * log_sigmoid(in[i]) + (1 - y[i]) * log_sigmoid(-in[i]));
      }
      l.push_back(s / static_cast<double>(classes));
    }
    return TensorList{reduce_ref(l, shape.size() == 2 ? Shape{shape[0]} : Shape{}, red)};
  };
  r.differentiable = weighted ? std::vector<size_t>{0, 2} : std::vector<size_t>{0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

// multi_margin_loss of scores `shape` ([N, C] or [C]) against class indices, order p.
OpRow multi_margin_row(const std::string& name, const Shape& shape, int64_t p, bool weighted, Reduction red,
                       uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{shape_str(shape), [=](DType t, Device d) {
                  const int64_t classes = shape.back();
                  const Shape rows = shape.size() == 2 ? Shape{shape[0]} : Shape{};
                  TensorList in{rnd(shape, t, d, seed, 1.5), class_targets(rows, classes, seed + 1, 0, -100, d)};
                  if (weighted) in.push_back(rnd_range({classes}, t, d, seed + 2, 0.3, 2.0));
                  return in;
                }}};
  r.op = [=](const TensorList& x) {
    return TensorList{multi_margin_loss(x[0], x[1], p, 0.7, weighted ? x[2] : Tensor(), red)};
  };
  r.reference = [=](const TensorList& x) {
    const Values in = values(x[0]), tv = values(x[1]);
    const size_t classes = static_cast<size_t>(shape.back());
    const Values w = weighted ? values(x[2]) : Values(classes, 1.0);
    Values l;
    for (size_t row = 0; row < tv.size(); ++row) {
      const size_t y = static_cast<size_t>(tv[row]);
      double s = 0;
      for (size_t j = 0; j < classes; ++j) {
        if (j == y) continue;
        const double z = std::max(0.0, 0.7 - in[row * classes + y] + in[row * classes + j]);
        s += w[y] * (p == 1 ? z : z * z);
      }
      l.push_back(s / static_cast<double>(classes));
    }
    return TensorList{reduce_ref(l, x[1].sizes(), red)};
  };
  r.differentiable = weighted ? std::vector<size_t>{0, 2} : std::vector<size_t>{0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

// Lists of class indices for [4, 5] scores: two classes then -1 (and a listed index after it, which
// does not count), none, a duplicate, and all five classes (no class left to rank below).
Tensor class_lists(Device d) {
  return tensor<int64_t>({3, 0, -1, 1, 2, -1, 4, 4, 4, 4, 2, 2, 1, -1, 0, 0, 1, 2, 3, 4}, {4, 5}).to(d);
}

OpRow multilabel_margin_row(const std::string& name, bool batched, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{batched ? "[4, 5]" : "[5]", [=](DType t, Device d) {
                  const Tensor lists = class_lists(d);
                  return TensorList{rnd(batched ? Shape{4, 5} : Shape{5}, t, d, seed, 1.5),
                                    batched ? lists : lists.select(0, 0)};
                }}};
  r.op = [red](const TensorList& x) { return TensorList{multilabel_margin_loss(x[0], x[1], red)}; };
  r.reference = [=](const TensorList& x) {
    const Values in = values(x[0]), tv = values(x[1]);
    const size_t classes = 5;
    Values l;
    for (size_t row = 0; row < tv.size() / classes; ++row) {
      std::vector<size_t> listed;
      for (size_t k = 0; k < classes && tv[row * classes + k] >= 0; ++k) {
        listed.push_back(static_cast<size_t>(tv[row * classes + k]));
      }
      const std::set<size_t> in_list(listed.begin(), listed.end());
      double s = 0;
      for (size_t j : listed) {
        for (size_t k = 0; k < classes; ++k) {
          if (!in_list.count(k)) s += std::max(0.0, 1.0 - (in[row * classes + j] - in[row * classes + k]));
        }
      }
      l.push_back(s / static_cast<double>(classes));
    }
    return TensorList{reduce_ref(l, batched ? Shape{4} : Shape{}, red)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

}  // namespace

void add_margin_loss_rows(std::vector<OpRow>& rows) {
  rows.push_back(soft_margin_row(Reduction::Mean, false));
  rows.back().errors = {
      {"target of another shape",
       [] {
         soft_margin_loss(zeros({3, 4}), zeros({4}));
       },
       {"soft_margin_loss", "[3, 4]", "[4]"}},
      {"bool labels", [] { soft_margin_loss(zeros({2}), ones({2}, DType::Bool)); }, {"soft_margin_loss", "bool"}},
      {"Reduction::BatchMean",
       [] { soft_margin_loss(zeros({2}), zeros({2}), Reduction::BatchMean); },
       {"soft_margin_loss", "BatchMean"}},
  };
  rows.push_back(soft_margin_row(Reduction::Sum, true));
  rows.push_back(soft_margin_row(Reduction::None, false));
  rows.push_back(hinge_row(Reduction::Mean, 1.0));
  rows.back().errors = {
      {"an infinite margin",
       [] { hinge_embedding_loss(zeros({2}), ones({2}), INFINITY); },
       {"hinge_embedding_loss", "margin", "inf"}},
      {"target of another shape",
       [] {
         hinge_embedding_loss(zeros({2, 3}), ones({3}));
       },
       {"hinge_embedding_loss", "[2, 3]", "[3]"}},
  };
  rows.push_back(hinge_row(Reduction::None, 0.5));
  rows.push_back(multilabel_soft_row("multilabel_soft_margin_loss", {4, 5}, false, Reduction::Mean, 321));
  rows.back().errors = {
      {"a 3-d input",
       [] {
         multilabel_soft_margin_loss(zeros({2, 3, 4}), zeros({2, 3, 4}));
       },
       {"multilabel_soft_margin_loss", "[N, C]", "[2, 3, 4]"}},
      {"a weight of another length",
       [] {
         multilabel_soft_margin_loss(zeros({2, 3}), zeros({2, 3}), ones({4}));
       },
       {"multilabel_soft_margin_loss", "weight", "[4]", "3 classes"}},
  };
  rows.push_back(multilabel_soft_row("multilabel_soft_margin_loss weighted, none", {4, 5}, true, Reduction::None, 323));
  rows.push_back(multilabel_soft_row("multilabel_soft_margin_loss [C], sum", {6}, false, Reduction::Sum, 325));
  rows.push_back(multi_margin_row("multi_margin_loss", {5, 4}, 1, false, Reduction::Mean, 331));
  rows.back().errors = {
      {"p 3",
       [] {
         multi_margin_loss(zeros({2, 3}), zeros({2}, DType::Int64), 3);
       },
       {"multi_margin_loss", "p", "1 or 2", "3"}},
      {"a target out of range",
       [] {
         multi_margin_loss(zeros({2, 3}), tensor<int64_t>({0, 3}, {2}));
       },
       {"multi_margin_loss", "target", "[0, 3)"}},
      {"float targets",
       [] {
         multi_margin_loss(zeros({2, 3}), zeros({2}));
       },
       {"multi_margin_loss", "integer", "float32"}},
      {"a target of another shape",
       [] {
         multi_margin_loss(zeros({2, 3}), zeros({3}, DType::Int64));
       },
       {"multi_margin_loss", "[3]", "[2, 3]"}},
  };
  rows.push_back(multi_margin_row("multi_margin_loss p 2, weighted, sum", {5, 4}, 2, true, Reduction::Sum, 333));
  rows.push_back(multi_margin_row("multi_margin_loss [C], p 2", {6}, 2, false, Reduction::None, 335));
  rows.push_back(multilabel_margin_row("multilabel_margin_loss", true, Reduction::Mean, 341));
  rows.back().errors = {
      {"a listed class out of range",
       [] {
         multilabel_margin_loss(zeros({1, 3}), tensor<int64_t>({0, 3, -1}, {1, 3}));
       },
       {"multilabel_margin_loss", "listed", "[0, 3)"}},
      {"a target of another shape",
       [] {
         multilabel_margin_loss(zeros({2, 3}), zeros({2}, DType::Int64));
       },
       {"multilabel_margin_loss", "[2]", "[2, 3]"}},
  };
  rows.push_back(multilabel_margin_row("multilabel_margin_loss none", true, Reduction::None, 343));
  rows.push_back(multilabel_margin_row("multilabel_margin_loss [C], sum", false, Reduction::Sum, 345));
}

}  // namespace kiln::test
