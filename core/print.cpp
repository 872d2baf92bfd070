// PyTorch-like printing: one format per tensor (integer-valued, fixed or scientific), columns
// padded to one width, long dims summarized with "..." (three items from each end).
#include <cmath>
#include <cstdio>
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
    case Format::Int: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v)); break;
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
  for (double v : vals) f.width = std::max<int>(f.width, static_cast<int>(fmt_value(v, f.kind).size()));
  return f;
}

void print_dim(std::ostream& os, const std::vector<double>& vals, const Shape& shape, size_t d, int64_t offset,
               const Format& f, bool summarize, int indent) {
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
      std::string s = fmt_value(vals[static_cast<size_t>(offset + i)], f.kind);
      os << std::string(static_cast<size_t>(f.width) - s.size(), ' ') << s;
    } else {
      print_dim(os, vals, shape, d + 1, offset + i * inner, f, summarize, indent + 1);
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

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> vals = to_vector_double();
  bool summarize = numel() > kSummarizeAbove;
  std::vector<double> shown;
  if (summarize) {
    // Format from the values that will be shown at the edges, approximated by the first/last ones.
    for (int64_t i = 0; i < std::min<int64_t>(numel(), 64); ++i) shown.push_back(vals[static_cast<size_t>(i)]);
    for (int64_t i = std::max<int64_t>(numel() - 64, 0); i < numel(); ++i) shown.push_back(vals[static_cast<size_t>(i)]);
  }
  Format f = choose_format(summarize ? shown : vals, dtype());
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << fmt_value(vals[0], f.kind);
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_dim(os, vals, sizes(), 0, 0, f, summarize, 7);
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
