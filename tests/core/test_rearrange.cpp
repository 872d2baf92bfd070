// flip, roll, repeat, pad, sort, argsort, one_hot and logsumexp beyond the op table's rows: the
// examples of PyTorch's documentation, NaN and tie order in sort, infinite inputs of logsumexp, and
// outputs that never alias their input; and the views among the newer ops (diagonal, unfold,
// unbind, meshgrid) sharing their input's storage, writes through diagonal included.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {

std::vector<double> vals(const Tensor& t) { return t.contiguous().to_vector_double(); }

}  // namespace

TEST_CASE("pad's four modes on a row, as torch.nn.functional.pad documents them", "[ops]") {
  const Tensor x = tensor(std::vector<double>{0, 1, 2, 3}).reshape({1, 4});
  CHECK(vals(pad(x, {2, 2})) == std::vector<double>{0, 0, 0, 1, 2, 3, 0, 0});
  CHECK(vals(pad(x, {1, 0}, PadMode::Constant, -7)) == std::vector<double>{-7, 0, 1, 2, 3});
  CHECK(vals(pad(x, {2, 2}, PadMode::Reflect)) == std::vector<double>{2, 1, 0, 1, 2, 3, 2, 1});
  CHECK(vals(pad(x, {2, 2}, PadMode::Replicate)) == std::vector<double>{0, 0, 0, 1, 2, 3, 3, 3});
  CHECK(vals(pad(x, {2, 2}, PadMode::Circular)) == std::vector<double>{2, 3, 0, 1, 2, 3, 0, 1});
  CHECK(vals(pad(x, {-1, -2})) == std::vector<double>{1});
  // Two dims: the last pair pads dim 0.
  CHECK(pad(x, {0, 1, 1, 0}).sizes() == Shape{2, 5});
  CHECK(vals(pad(x, {0, 1, 1, 0})) == std::vector<double>{0, 0, 0, 0, 0, 0, 1, 2, 3, 0});
}

TEST_CASE("flip, roll, repeat and pad return new tensors, never views of their input", "[ops]") {
  Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}).reshape({2, 3});
  for (Tensor y : {flip(x, {}), roll(x, {0}, {1}), roll(x, {3}, {1}), repeat(x, {1, 1}), pad(x, {0, 0}),
                   pad(x, {-1, 0}), pad(x, {0, 0}, PadMode::Reflect)}) {
    y.fill_(0.0);
    CHECK(vals(x) == std::vector<double>{1, 2, 3, 4, 5, 6});
  }
  // A 0-d tensor rolls (flattened) and flips (along no dim) to itself; it has no dim 0 to name.
  const Tensor s = tensor(std::vector<double>{4.0}).reshape({});
  CHECK(roll(s, {3}).sizes() == Shape{});
  CHECK(roll(s, {3}).item<double>() == 4.0);
  CHECK(flip(s, {}).item<double>() == 4.0);
  CHECK_THROWS_AS(flip(s, {0}), IndexError);
  // repeat(x, {2, 0}) is empty; repeat of a 1-d into 3 dims.
  CHECK(repeat(x, {2, 0}).sizes() == Shape{4, 0});
  CHECK(vals(repeat(tensor(std::vector<double>{1, 2}), {2, 1, 2})) == std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2});
}

TEST_CASE("sort puts NaN above every number and keeps equal values in order", "[ops]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor x = tensor(std::vector<double>{3, nan, 1, 3, -inf, 1});
  auto [up, up_i] = sort(x);
  const std::vector<double> u = vals(up);
  CHECK(std::vector<double>(u.begin(), u.end() - 1) == std::vector<double>{-inf, 1, 1, 3, 3});
  CHECK(std::isnan(u.back()));
  CHECK(up_i.to_vector<int64_t>() == std::vector<int64_t>{4, 2, 5, 0, 3, 1});
  auto [down, down_i] = sort(x, -1, true);
  CHECK(std::isnan(vals(down).front()));
  CHECK(down_i.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 3, 2, 5, 4});
  CHECK(argsort(x, 0, true).to_vector<int64_t>() == down_i.to_vector<int64_t>());
  // Along dim 0 of a matrix: each column sorted on its own.
  const Tensor m = tensor(std::vector<double>{3, 0, 1, 2, 2, 1}).reshape({3, 2});
  CHECK(vals(sort(m, 0).first) == std::vector<double>{1, 0, 2, 1, 3, 2});
}

TEST_CASE("one_hot and logsumexp", "[ops]") {
  const Tensor labels = tensor<int64_t>({2, 0, 1}, {3});
  const Tensor oh = one_hot(labels);
  CHECK(oh.dtype() == DType::Int64);
  CHECK(oh.sizes() == Shape{3, 3});
  CHECK(oh.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0});
  CHECK(one_hot(labels, 5).sizes() == Shape{3, 5});

  const double inf = std::numeric_limits<double>::infinity();
  // Rows: large values (exp overflows without the shift), all -inf (an empty sum: -inf), one +inf.
  const Tensor x = tensor(std::vector<double>{1000, 1000, -inf, -inf, 1, inf}).reshape({3, 2});
  const std::vector<double> l = vals(logsumexp(x, {1}));
  CHECK(l[0] == Approx(1000 + std::log(2.0)).epsilon(1e-15));
  CHECK(l[1] == -inf);
  CHECK(l[2] == inf);
  // Its gradient is softmax.
  Tensor y = tensor(std::vector<double>{0.5, -1.0, 2.0}).set_requires_grad(true);
  logsumexp(y).backward();
  const std::vector<double> g = vals(y.grad()), p = vals(softmax(y.detach(), 0));
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(p[i]).epsilon(1e-14));
}

TEST_CASE("diagonal, unfold, unbind and meshgrid are views, and diag_embed undoes diagonal", "[ops]") {
  Tensor m = arange(0, 12, 1, TensorOptions(DType::Float64)).reshape({3, 4});
  Tensor d = diagonal(m, 1);
  CHECK(d.to_vector_double() == std::vector<double>{1, 6, 11});
  CHECK(d.storage() == m.storage());
  d.fill_(-1.0);  // a write through the view
  CHECK(m.to_vector_double()[6] == -1.0);
  CHECK(diagonal(m, 4).numel() == 0);                                   // past the last column: an empty diagonal
  CHECK(diagonal(m, -2).to_vector_double() == std::vector<double>{8});  // only (2, 0)
  const Tensor batch = arange(0, 6, 1, TensorOptions(DType::Float64)).reshape({2, 3});
  const Tensor embedded = diag_embed(batch);
  CHECK(embedded.sizes() == Shape{2, 3, 3});
  CHECK(diagonal(embedded, 0, -2, -1).to_vector_double() == batch.to_vector_double());
  CHECK(sum(embedded).item<double>() == sum(batch).item<double>());  // zeros off the diagonal
  CHECK(trace(m).item<double>() == 0 + 5 + 10.0);

  const Tensor x = arange(0, 7, 1, TensorOptions(DType::Float64));
  Tensor w = x.unfold(0, 3, 2);  // windows [0 1 2], [2 3 4], [4 5 6]
  CHECK(w.sizes() == Shape{3, 3});
  CHECK(w.storage() == x.storage());
  CHECK(w.to_vector_double() == std::vector<double>{0, 1, 2, 2, 3, 4, 4, 5, 6});
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  leaf.unfold(0, 3, 2).sum().backward();
  // Elements 2 and 4 sit in two windows each; 0, 1, 3, 5 and 6 in one.
  CHECK(leaf.grad().to_vector_double() == std::vector<double>{1, 1, 2, 1, 2, 1, 1});

  const TensorList rows = unbind(m);
  CHECK(rows.size() == 3);
  CHECK(rows[2].storage() == m.storage());
  const TensorList grid = meshgrid({x.narrow(0, 0, 2), x.narrow(0, 0, 3)}, MeshIndexing::Xy);
  CHECK(grid[0].sizes() == Shape{3, 2});
  CHECK(grid[0].storage() == x.storage());
}

TEST_CASE("unfold and fold (im2col, col2im) take an empty batch", "[ops]") {
  // conv_transpose3d folds a batch of none; fold read the rows' length from the data (-1).
  CHECK(unfold(zeros({0, 2, 5, 4}), {3, 2}).sizes() == Shape{0, 12, 9});
  CHECK(fold(zeros({0, 12, 9}), {5, 4}, {3, 2}).sizes() == Shape{0, 2, 5, 4});
}
