// The BLAS-shaped products of core/ops/blas.h: shape checks naming the op first, then matmul with
// views, mul and add around it.
#include "core/ops/blas.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "core/ops/einsum.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/matmul.h"
#include "core/ops/triangle.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// matmul, its errors (dtypes, devices) renamed to op.
Tensor product(const char* op, const Tensor& a, const Tensor& b) {
  try {
    return matmul(a, b);
  } catch (const DTypeError& e) {
    throw DTypeError(std::string(op) + ": " + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(std::string(op) + ": " + e.what());
  }
}

void check_rank(const char* op, const Tensor& t, const char* name, int64_t rank) {
  ops::check_defined(op, t, name);
  if (t.dim() != rank) {
    throw ShapeError(std::string(op) + ": " + name + " must be " + std::to_string(rank) + "-d, got " +
                     shape_str(t.sizes()));
  }
}

void check_inner(const char* op, const Tensor& a, const Tensor& b, int64_t a_dim, int64_t b_dim) {
  if (a.size(a_dim) != b.size(b_dim)) {
    throw ShapeError(std::string(op) + ": the shapes " + shape_str(a.sizes()) + " and " + shape_str(b.sizes()) +
                     " cannot be multiplied (" + std::to_string(a.size(a_dim)) + " against " +
                     std::to_string(b.size(b_dim)) + ")");
  }
}

// Operands of a product of a (exactly a_rank dims) and b (b_rank): same batch size when both are
// 3-d (no broadcasting), a's last dim against b's first (1-d b) or second-last.
void check_operands(const char* op, const Tensor& a, const char* a_name, int64_t a_rank, const Tensor& b,
                    const char* b_name, int64_t b_rank) {
  check_rank(op, a, a_name, a_rank);
  check_rank(op, b, b_name, b_rank);
  if (a_rank == 3 && b_rank == 3 && a.size(0) != b.size(0)) {
    throw ShapeError(std::string(op) + ": the batch sizes differ, " + shape_str(a.sizes()) + " and " +
                     shape_str(b.sizes()) + " (" + op + " does not broadcast; matmul does)");
  }
  check_inner(op, a, b, a_rank - 1, b_rank == 1 ? 0 : b_rank - 2);
}

// beta input + alpha product, input broadcasting to the product's shape and of its dtype.
Tensor scaled_sum(const char* op, const Tensor& input, const Tensor& prod, double beta, double alpha) {
  ops::check_defined(op, input, "input");
  ops::common_device(op, {&input, &prod});
  if (input.dtype() != prod.dtype()) {
    throw DTypeError(std::string(op) + ": input is " + dtype_name(input.dtype()) + ", the product " +
                     dtype_name(prod.dtype()));
  }
  bool fits = input.dim() <= prod.dim();
  for (int64_t k = 1; fits && k <= input.dim(); ++k) {
    const int64_t s = input.size(input.dim() - k);
    fits = s == 1 || s == prod.size(prod.dim() - k);
  }
  if (!fits) {
    throw ShapeError(std::string(op) + ": input " + shape_str(input.sizes()) +
                     " does not broadcast to the product's shape " + shape_str(prod.sizes()));
  }
  const Tensor scaled = alpha == 1.0 ? prod : mul(prod, alpha);
  if (beta == 0.0) return scaled;  // the input's values are ignored, NaNs included
  return add(beta == 1.0 ? input : mul(input, beta), scaled);
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_operands("mm", a, "the first operand", 2, b, "the second operand", 2);
  return product("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, "the first operand", 3, b, "the second operand", 3);
  return product("bmm", a, b);
}

Tensor mv(const Tensor& mat, const Tensor& vec) {
  check_operands("mv", mat, "the matrix", 2, vec, "the vector", 1);
  return product("mv", mat, vec);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_operands("dot", a, "the first operand", 1, b, "the second operand", 1);
  return product("dot", a, b);
}

Tensor inner(const Tensor& a, const Tensor& b) {
  const char* op = "inner";
  ops::check_defined(op, a, "the first operand");
  ops::check_defined(op, b, "the second operand");
  if (a.dim() == 0 || b.dim() == 0) {
    ops::common_device(op, {&a, &b});
    return mul(a, b);
  }
  check_inner(op, a, b, a.dim() - 1, b.dim() - 1);
  return tensordot(a, b, {a.dim() - 1}, {b.dim() - 1});
}

Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta, double alpha) {
  check_operands("addmm", m1, "mat1", 2, m2, "mat2", 2);
  return scaled_sum("addmm", input, product("addmm", m1, m2), beta, alpha);
}

Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  check_operands("baddbmm", b1, "batch1", 3, b2, "batch2", 3);
  return scaled_sum("baddbmm", input, product("baddbmm", b1, b2), beta, alpha);
}

Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  const char* op = "addbmm";
  check_operands(op, b1, "batch1", 3, b2, "batch2", 3);
  // The sum of the batch's products is one product over the batch and k together:
  // [n, B k] @ [B k, m].
  const int64_t batch = b1.size(0), n = b1.size(1), k = b1.size(2), m = b2.size(2);
  const Tensor rows = b1.permute({1, 0, 2}).reshape({n, batch * k});
  return scaled_sum(op, input, product(op, rows, b2.reshape({batch * k, m})), beta, alpha);
}

Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, double beta, double alpha) {
  check_operands("addmv", mat, "mat", 2, vec, "vec", 1);
  return scaled_sum("addmv", input, product("addmv", mat, vec), beta, alpha);
}

Tensor addr(const Tensor& input, const Tensor& v1, const Tensor& v2, double beta, double alpha) {
  const char* op = "addr";
  check_rank(op, v1, "vec1", 1);
  check_rank(op, v2, "vec2", 1);
  ops::common_device(op, {&v1, &v2});
  if (v1.dtype() != v2.dtype()) {
    throw DTypeError(std::string(op) + ": vec1 is " + dtype_name(v1.dtype()) + ", vec2 " + dtype_name(v2.dtype()));
  }
  return scaled_sum(op, input, outer(v1, v2), beta, alpha);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  const char* op = "tensordot";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  if (dims < 0 || dims > std::min(a.dim(), b.dim())) {
    throw ShapeError(std::string(op) + ": dims must be in [0, " + std::to_string(std::min(a.dim(), b.dim())) +
                     "] for a " + shape_str(a.sizes()) + " and b " + shape_str(b.sizes()) + ", got " +
                     std::to_string(dims));
  }
  std::vector<int64_t> dims_a, dims_b;
  for (int64_t i = 0; i < dims; ++i) {
    dims_a.push_back(a.dim() - dims + i);
    dims_b.push_back(i);
  }
  return tensordot(a, b, dims_a, dims_b);
}

Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a,
                 const std::vector<int64_t>& dims_b) {
  const char* op = "tensordot";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  const std::string what = "a " + shape_str(a.sizes()) + " dims " + shape_str(dims_a) + ", b " + shape_str(b.sizes()) +
                           " dims " + shape_str(dims_b);
  if (dims_a.size() != dims_b.size()) {
    throw ShapeError(std::string(op) + ": as many dims of a as of b must be named, got " + what);
  }
  // Each operand permuted to [free..., contracted...] (a) or [contracted..., free...] (b) and seen
  // as a matrix: one product.
  auto arrange = [&](const Tensor& t, const std::vector<int64_t>& dims, bool contracted_last, Shape& free_sizes) {
    std::vector<bool> used(static_cast<size_t>(t.dim()), false);
    Shape contracted;
    for (int64_t d : dims) {
      const int64_t w = d < 0 ? d + t.dim() : d;
      if (w < 0 || w >= t.dim() || used[static_cast<size_t>(w)]) {
        throw ShapeError(std::string(op) + ": each dim must be in range and named once, got " + what);
      }
      used[static_cast<size_t>(w)] = true;
      contracted.push_back(w);
    }
    Shape free;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (!used[static_cast<size_t>(d)]) {
        free.push_back(d);
        free_sizes.push_back(t.size(d));
      }
    Shape order = contracted_last ? free : contracted;
    const Shape& rest = contracted_last ? contracted : free;
    order.insert(order.end(), rest.begin(), rest.end());
    int64_t k = 1;
    for (int64_t d : contracted) k *= t.size(d);
    const int64_t f = shape_numel(free_sizes);
    const Tensor p = t.permute(order);
    return std::pair{contracted_last ? p.reshape({f, k}) : p.reshape({k, f}), contracted};
  };
  Shape free_a, free_b;
  const auto [ma, ca] = arrange(a, dims_a, true, free_a);
  const auto [mb, cb] = arrange(b, dims_b, false, free_b);
  for (size_t i = 0; i < ca.size(); ++i) {
    if (a.size(ca[i]) != b.size(cb[i])) {
      throw ShapeError(std::string(op) + ": contracted dims differ in size (" + std::to_string(a.size(ca[i])) +
                       " against " + std::to_string(b.size(cb[i])) + "), " + what);
    }
  }
  Shape out = free_a;
  out.insert(out.end(), free_b.begin(), free_b.end());
  return product(op, ma, mb).reshape(out);
}

Tensor multi_dot(const TensorList& tensors) {
  const char* op = "multi_dot";
  const size_t count = tensors.size();
  if (count < 2) throw Error(std::string(op) + ": needs two tensors at least, got " + std::to_string(count));
  std::vector<const Tensor*> all;
  std::string shapes;
  for (size_t i = 0; i < count; ++i) {
    ops::check_defined(op, tensors[i], "tensor");
    all.push_back(&tensors[i]);
    shapes += (i ? ", " : "") + shape_str(tensors[i].sizes());
  }
  ops::common_device(op, all);
  // Each as a matrix: a 1-d first one a row, a 1-d last one a column.
  TensorList mats;
  for (size_t i = 0; i < count; ++i) {
    const Tensor& t = tensors[i];
    const bool end = i == 0 || i + 1 == count;
    if (t.dim() != 2 && !(end && t.dim() == 1)) {
      throw ShapeError(std::string(op) + ": tensor " + std::to_string(i) + " must be 2-d" + (end ? " or 1-d" : "") +
                       ", got the shapes " + shapes);
    }
    if (t.dtype() != tensors[0].dtype()) {
      throw DTypeError(std::string(op) + ": the tensors must share a dtype, tensor 0 is " +
                       dtype_name(tensors[0].dtype()) + ", tensor " + std::to_string(i) + " " + dtype_name(t.dtype()));
    }
    mats.push_back(t.dim() == 2 ? t : i == 0 ? t.unsqueeze(0) : t.unsqueeze(1));
  }
  std::vector<int64_t> p{mats[0].size(0)};
  for (size_t i = 0; i < count; ++i) {
    if (i > 0 && mats[i].size(0) != p.back()) {
      throw ShapeError(std::string(op) + ": tensors " + std::to_string(i - 1) + " and " + std::to_string(i) +
                       " cannot be multiplied, the shapes " + shapes);
    }
    p.push_back(mats[i].size(1));
  }
  // cost[i][j]: the fewest multiply-adds for mats i..j; split[i][j]: where its last product splits.
  std::vector<std::vector<double>> cost(count, std::vector<double>(count, 0.0));
  std::vector<std::vector<size_t>> split(count, std::vector<size_t>(count, 0));
  for (size_t len = 2; len <= count; ++len) {
    for (size_t i = 0; i + len <= count; ++i) {
      const size_t j = i + len - 1;
      cost[i][j] = std::numeric_limits<double>::infinity();
      for (size_t s = i; s < j; ++s) {
        const double c = cost[i][s] + cost[s + 1][j] +
                         static_cast<double>(p[i]) * static_cast<double>(p[s + 1]) * static_cast<double>(p[j + 1]);
        if (c < cost[i][j]) {
          cost[i][j] = c;
          split[i][j] = s;
        }
      }
    }
  }
  const std::function<Tensor(size_t, size_t)> chain = [&](size_t i, size_t j) -> Tensor {
    if (i == j) return mats[i];
    return product(op, chain(i, split[i][j]), chain(split[i][j] + 1, j));
  };
  Tensor out = chain(0, count - 1);
  if (tensors.back().dim() == 1) out = out.squeeze(-1);
  if (tensors.front().dim() == 1) out = out.squeeze(0);
  return out;
}

}  // namespace kiln
