// einsum: the equation parsed into a list of labels per operand (the ellipsis dims as labels of
// their own, numbered from the right), each operand reduced to its distinct labels (diagonals of
// repeated ones, sums of those nothing else needs), then contracted with the next one as a batched
// matmul over a [batch, rows, inner] x [batch, inner, columns] permutation of the two, and the
// result permuted into the output's order.
#include "core/ops/einsum.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// Letters are labels 0..51; the ellipsis dims, counted from the right, are 52, 53, ... so that the
// ellipsis of every operand and of the output names the same dims.
constexpr int kEllipsisBase = 52;
using Labels = std::vector<int>;

int letter_label(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c - 'A' + 26; }
char label_letter(int l) { return static_cast<char>(l < 26 ? 'a' + l : 'A' + l - 26); }

struct Term {
  Labels labels;  // per dim of the operand (or output), ellipsis dims included
  bool has_ellipsis = false;
};

[[noreturn]] void fail(const std::string& equation, const std::string& what) {
  throw Error("einsum: " + what + " (equation \"" + equation + "\")");
}

// One term: letters and at most one "..."; `dims` the operand's rank (-1 for the output, whose
// ellipsis takes `ellipsis_dims`).
Term parse_term(const std::string& equation, const std::string& text, int64_t dims, int64_t ellipsis_dims) {
  Term t;
  std::vector<int> before, after;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (t.has_ellipsis || text.compare(i, 3, "...") != 0) fail(equation, "term \"" + text + "\" has a stray '.'");
      t.has_ellipsis = true;
      i += 2;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      (t.has_ellipsis ? after : before).push_back(letter_label(c));
    } else {
      fail(equation, std::string("term \"") + text + "\" holds '" + c + "'; labels are letters a-z and A-Z");
    }
  }
  const int64_t lettered = static_cast<int64_t>(before.size() + after.size());
  int64_t middle = 0;
  if (dims >= 0) {
    if (t.has_ellipsis ? lettered > dims : lettered != dims) {
      fail(equation, "term \"" + text + "\" labels " + std::to_string(lettered) + " dims of an operand with " +
                         std::to_string(dims));
    }
    middle = t.has_ellipsis ? dims - lettered : 0;
  } else {
    middle = t.has_ellipsis ? ellipsis_dims : 0;
  }
  t.labels = before;
  for (int64_t k = middle - 1; k >= 0; --k) t.labels.push_back(kEllipsisBase + static_cast<int>(k));
  t.labels.insert(t.labels.end(), after.begin(), after.end());
  return t;
}

std::string strip_spaces(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ') out += c;
  return out;
}

// An operand, or a product of operands, with a label per dim.
struct Factor {
  Tensor t;
  Labels labels;
};

// x's diagonal over the dims a < b of equal size: one dim at a, b removed (index_select of the
// flattened pair at i (n + 1)).
Tensor diagonal(const Tensor& x, int64_t a, int64_t b) {
  Shape order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != b) order.push_back(d);
  order.insert(order.begin() + a + 1, b);  // b right after a
  const int64_t n = x.size(a);
  Tensor y = x.permute(order);
  Shape merged = y.sizes();
  merged[static_cast<size_t>(a)] = n * n;
  merged.erase(merged.begin() + a + 1);
  y = y.reshape(merged);
  const Tensor index = arange(0, n * n, n + 1, TensorOptions(DType::Int64, x.device()));
  return index_select(y, a, index);
}

// Diagonals of labels repeated within the operand, and sums of labels no other operand and not the
// output has (`needed` counts, per label, the terms still to come that hold it, output included).
Factor reduce_alone(Tensor t, Labels labels, const std::map<int, int>& needed) {
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = labels.size(); j-- > i + 1;) {
      if (labels[j] != labels[i]) continue;
      t = diagonal(t, static_cast<int64_t>(i), static_cast<int64_t>(j));
      labels.erase(labels.begin() + static_cast<int64_t>(j));
    }
  }
  Shape sum_dims;
  Labels kept;
  for (size_t i = 0; i < labels.size(); ++i) {
    auto it = needed.find(labels[i]);
    if (it == needed.end() || it->second == 0) {
      sum_dims.push_back(static_cast<int64_t>(i));
    } else {
      kept.push_back(labels[i]);
    }
  }
  if (!sum_dims.empty()) t = sum(t, sum_dims);
  return {t, kept};
}

// The size of each label across the operands, a size 1 giving way to another (broadcasting).
void record_sizes(const std::string& equation, const Factor& op, size_t which, std::map<int, int64_t>& size) {
  for (size_t i = 0; i < op.labels.size(); ++i) {
    const int l = op.labels[i];
    const int64_t s = op.t.size(static_cast<int64_t>(i));
    auto [it, fresh] = size.try_emplace(l, s);
    if (fresh || it->second == s) continue;
    if (it->second == 1 || s == 1) {
      it->second = std::max(it->second, s);
      continue;
    }
    const std::string name = l >= kEllipsisBase ? "the ellipsis dims" : std::string("label '") + label_letter(l) + "'";
    fail(equation, name + " has size " + std::to_string(s) + " in operand " + std::to_string(which) + " " +
                       shape_str(op.t.sizes()) + " but " + std::to_string(it->second) + " elsewhere");
  }
}

// a x b over their labels: those in both that `needed` no longer wants are summed (the matmul's
// inner dim), those in both that it wants are the batch, the rest rows (a's) and columns (b's).
// Dims of size 1 broadcast against the other operand's.
Factor contract(const Factor& a, const Factor& b, const std::map<int, int>& needed,
                const std::map<int, int64_t>& size) {
  auto has = [](const Labels& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); };
  auto wanted = [&](int l) {
    auto it = needed.find(l);
    return it != needed.end() && it->second > 0;
  };
  Labels batch, rows, cols, inner;
  for (int l : a.labels) {
    if (!has(b.labels, l)) {
      rows.push_back(l);
    } else {
      (wanted(l) ? batch : inner).push_back(l);
    }
  }
  for (int l : b.labels)
    if (!has(a.labels, l)) cols.push_back(l);
  // Each operand permuted to [batch, its own, inner] (b: [batch, inner, its own]), which holds
  // each of its labels once, then its dims of size 1 expanded to the full sizes.
  auto arrange = [&](const Factor& op, const std::vector<const Labels*>& groups) {
    Shape order, full;
    for (const Labels* g : groups) {
      for (int l : *g) {
        order.push_back(std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin());
        full.push_back(size.at(l));
      }
    }
    return op.t.permute(order).expand(full);
  };
  auto product = [&](const Labels& ls) {
    int64_t p = 1;
    for (int l : ls) p *= size.at(l);
    return p;
  };
  const Tensor ta = arrange(a, {&batch, &rows, &inner}), tb = arrange(b, {&batch, &inner, &cols});
  const int64_t nb = product(batch), nr = product(rows), nc = product(cols), ni = product(inner);
  Tensor out = matmul(ta.reshape({nb, nr, ni}), tb.reshape({nb, ni, nc}));
  Shape shape;
  Labels labels;
  for (const Labels* g : {&batch, &rows, &cols}) {
    for (int l : *g) {
      shape.push_back(size.at(l));
      labels.push_back(l);
    }
  }
  return {out.reshape(shape), labels};
}

}  // namespace

Tensor outer(const Tensor& a, const Tensor& b) {
  ops::check_defined("outer", a, "first operand");
  ops::check_defined("outer", b, "second operand");
  if (a.dim() != 1 || b.dim() != 1) {
    throw ShapeError("outer: needs two 1-d tensors, got " + shape_str(a.sizes()) + " and " + shape_str(b.sizes()));
  }
  return a.unsqueeze(1) * b.unsqueeze(0);
}

Tensor einsum(const std::string& equation, const TensorList& operands) {
  const std::string eq = strip_spaces(equation);
  if (operands.empty()) fail(equation, "needs at least one operand");
  for (size_t i = 0; i < operands.size(); ++i) {
    ops::check_defined("einsum", operands[i], ("operand " + std::to_string(i)).c_str());
  }
  std::vector<const Tensor*> all;
  for (const Tensor& t : operands) all.push_back(&t);
  ops::common_device("einsum", all);
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].is_floating_point() || operands[i].dtype() != operands[0].dtype()) {
      throw DTypeError("einsum: operands must share one floating dtype, got operand " + std::to_string(i) + " " +
                       dtype_name(operands[i].dtype()) + " " + shape_str(operands[i].sizes()) + " beside operand 0 " +
                       dtype_name(operands[0].dtype()) + " " + shape_str(operands[0].sizes()));
    }
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> texts;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    texts.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (texts.size() != operands.size()) {
    fail(equation, std::to_string(texts.size()) + " terms for " + std::to_string(operands.size()) + " operands");
  }
  std::vector<Term> terms;
  int64_t ellipsis_dims = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    terms.push_back(parse_term(equation, texts[i], operands[i].dim(), 0));
    int64_t e = 0;
    for (int l : terms.back().labels) e += l >= kEllipsisBase ? 1 : 0;
    ellipsis_dims = std::max(ellipsis_dims, e);
  }
  Term out;
  if (arrow != std::string::npos) {
    const std::string rhs = eq.substr(arrow + 2);
    if (rhs.find("->") != std::string::npos || rhs.find(',') != std::string::npos) {
      fail(equation, "the output term \"" + rhs + "\" must be one term");
    }
    const bool any_ellipsis = std::any_of(terms.begin(), terms.end(), [](const Term& t) { return t.has_ellipsis; });
    out = parse_term(equation, rhs, -1, ellipsis_dims);
    if (out.has_ellipsis && !any_ellipsis) fail(equation, "the output has an ellipsis that no operand has");
    if (!out.has_ellipsis && ellipsis_dims > 0) {
      fail(equation, "the output leaves out the ellipsis dims; name them with \"...\"");
    }
    for (size_t i = 0; i < out.labels.size(); ++i) {
      const int l = out.labels[i];
      if (std::count(out.labels.begin(), out.labels.end(), l) > 1) {
        fail(equation, std::string("the output repeats label '") + label_letter(l) + "'");
      }
      const bool anywhere = std::any_of(terms.begin(), terms.end(), [l](const Term& t) {
        return std::find(t.labels.begin(), t.labels.end(), l) != t.labels.end();
      });
      if (!anywhere) fail(equation, std::string("output label '") + label_letter(l) + "' is in no operand");
    }
  } else {
    // Implicit output: the ellipsis dims, then the letters that occur once, alphabetically.
    std::map<int, int> count;
    for (const Term& t : terms)
      for (int l : t.labels) ++count[l];
    for (int64_t k = ellipsis_dims - 1; k >= 0; --k) out.labels.push_back(kEllipsisBase + static_cast<int>(k));
    for (const auto& [l, c] : count)
      if (l < kEllipsisBase && c == 1) out.labels.push_back(l);
  }

  // needed[l]: how many of the terms not yet contracted (the output included) hold label l.
  std::map<int, int> needed;
  auto add_needs = [&](const Labels& ls, int by) {
    Labels distinct = ls;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int l : distinct) needed[l] += by;
  };
  for (const Term& t : terms) add_needs(t.labels, 1);
  add_needs(out.labels, 1);

  std::map<int, int64_t> size;
  for (size_t i = 0; i < operands.size(); ++i) {
    Factor raw{operands[i], terms[i].labels};
    // A repeated label's dims must agree before its diagonal is taken.
    std::map<int, int64_t> own;
    for (size_t d = 0; d < raw.labels.size(); ++d) {
      const int64_t s = raw.t.size(static_cast<int64_t>(d));
      auto [it, fresh] = own.try_emplace(raw.labels[d], s);
      if (!fresh && it->second != s) {
        fail(equation, std::string("label '") + label_letter(raw.labels[d]) + "' repeats in operand " +
                           std::to_string(i) + " " + shape_str(raw.t.sizes()) + " over dims of sizes " +
                           std::to_string(it->second) + " and " + std::to_string(s));
      }
    }
    record_sizes(equation, raw, i, size);
  }
  // `needed` with the labels of `ls` counted once more: what one side of a product must keep.
  auto plus = [&](const Labels& ls) {
    std::map<int, int> with = needed;
    for (int l : ls) ++with[l];
    return with;
  };
  // Factor by operand: its own reductions (keeping what the product with the operands before
  // needs), then that product.
  Factor acc;
  for (size_t i = 0; i < operands.size(); ++i) {
    add_needs(terms[i].labels, -1);  // this term is being consumed
    if (i == 0) {
      acc = reduce_alone(operands[0], terms[0].labels, needed);
      continue;
    }
    const Factor op = reduce_alone(operands[i], terms[i].labels, plus(acc.labels));
    acc = reduce_alone(acc.t, acc.labels, plus(op.labels));
    acc = contract(acc, op, needed, size);
  }
  // Into the output's order; broadcast ellipsis dims of size 1 expand to the full size.
  Shape order, full;
  for (int l : out.labels) {
    auto it = std::find(acc.labels.begin(), acc.labels.end(), l);
    if (it == acc.labels.end()) {  // an ellipsis dim the operands lack
      acc.t = acc.t.unsqueeze(acc.t.dim());
      acc.labels.push_back(l);
      it = acc.labels.end() - 1;
    }
    order.push_back(it - acc.labels.begin());
    full.push_back(size.count(l) ? size.at(l) : 1);
  }
  Tensor result = acc.t.permute(order);
  return result.sizes() == full ? result : result.expand(full).contiguous();
}

}  // namespace kiln
