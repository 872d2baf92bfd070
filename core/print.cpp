// PyTorch-like printing: one format per tensor (integer-valued, fixed or scientific), columns
// padded to one width, long dims summarized with "..." (three items from each end).
#include <cmath>
#include <cstdio>
#include <functional>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Format {
  enum Kind { Int, Bool, IntegerValued, Fixed, Sci } kind;
  int width = 1;
};

std::string fmt_value(double v, Format::Kind kind) {
  char buf[64];
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  switch (kind) {
    case Format::Int: std::snprintf(buf, sizeof buf, "%.0f", v); break;  // integer dtypes print from int64
    case Format::Bool: return v != 0 ? "True" : "False";
    case Format::IntegerValued: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
    case Format::Fixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
    case Format::Sci: std::snprintf(buf, sizeof buf, "%.4e", v); break;
  }
  return buf;
}

Format choose_format(const std::vector<double>& vals, DType dtype) {
  Format f;
  if (dtype == DType::Bool) {
    f.kind = Format::Bool;
  } else if (!is_floating(dtype)) {
    f.kind = Format::Int;
  } else {
    bool all_int = true;
    double max_abs = 0, min_abs = INFINITY;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) all_int = false;
      double a = std::fabs(v);
      max_abs = std::max(max_abs, a);
      if (a > 0) min_abs = std::min(min_abs, a);
    }
    if (all_int && max_abs < 1e8) {
      f.kind = Format::IntegerValued;
    } else if (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) || (max_abs / min_abs > 1000 && !all_int)) {
      f.kind = Format::Sci;
    } else {
      f.kind = Format::Fixed;
    }
  }
  return f;
}

// The text of element i (in logical order).
using Cell = std::function<std::string(size_t)>;

void print_dim(std::ostream& os, const Cell& cell, const Shape& shape, size_t d, int64_t offset, int width,
               bool summarize, int indent) {
  const int64_t n = shape[d];
  int64_t inner = 1;
  for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  os << '[';
  bool last_dim = d + 1 == shape.size();
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (last_dim ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - kEdgeItems;
    }
    if (last_dim) {
      std::string s = cell(static_cast<size_t>(offset + i));
      os << std::string(s.size() < static_cast<size_t>(width) ? static_cast<size_t>(width) - s.size() : 0, ' ') << s;
    } else {
      print_dim(os, cell, shape, d + 1, offset + i * inner, width, summarize, indent + 1);
    }
    if (i + 1 < n) {
      if (last_dim) {
        os << ", ";
      } else {
        os << ',' << std::string(shape.size() - d - 1, '\n') << std::string(static_cast<size_t>(indent + 1), ' ');
      }
    }
  }
  os << ']';
}

// The elements print_dim shows, in logical order: every one, or when summarizing the first and
// last kEdgeItems of each dim longer than twice that (rows included, not only the ends of the whole).
void shown_indices(const Shape& shape, size_t d, int64_t offset, bool summarize, std::vector<size_t>& out) {
  if (d == shape.size()) {
    out.push_back(static_cast<size_t>(offset));
    return;
  }
  const int64_t n = shape[d];
  int64_t inner = 1;
  for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    shown_indices(shape, d + 1, offset + i * inner, summarize, out);
  }
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  // Integers print from int64 (a double would round those past 2^53); the rest from double.
  const bool integral = !is_floating(dtype()) && dtype() != DType::Bool;
  const std::vector<int64_t> ints = integral ? to(DType::Int64).to_vector<int64_t>() : std::vector<int64_t>();
  const std::vector<double> vals = integral ? std::vector<double>() : to_vector_double();
  bool summarize = numel() > kSummarizeAbove;
  // The elements the format and width come from: the ones shown.
  std::vector<size_t> basis;
  if (numel() > 0) shown_indices(dim() == 0 ? Shape{1} : sizes(), 0, 0, summarize, basis);
  Format f;
  if (integral) {
    f.kind = Format::Int;
  } else {
    std::vector<double> shown;
    for (size_t i : basis) shown.push_back(vals[i]);
    f = choose_format(shown, dtype());
  }
  const Cell cell = [&](size_t i) {
    return integral ? std::to_string(ints[i]) : fmt_value(vals[i], f.kind);
  };
  for (size_t i : basis) f.width = std::max<int>(f.width, static_cast<int>(cell(i).size()));
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << cell(0);
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_dim(os, cell, sizes(), 0, 0, f.width, summarize, 7);
  }
  bool default_dtype = dtype() == DType::Float32 || dtype() == DType::Int64 || dtype() == DType::Bool;
  if (numel() == 0 && dim() > 1) os << ", size=" << shape_str(sizes());
  if (!default_dtype) os << ", dtype=" << dtype_name(dtype());
  if (!is_cpu()) os << ", device='" << device().str() << "'";
  if (grad_fn()) {
    os << ", grad_fn=<" << grad_fn()->name() << ">";
  } else if (requires_grad()) {
    os << ", requires_grad=True";
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
