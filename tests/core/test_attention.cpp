// scaled_dot_product_attention beyond the table: fully masked rows, thread-count independence of
// the backward, dropout masks shared by forward and backward, and one autograd node.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/kiln.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"
#include "tests/threads.h"

using namespace kiln;

TEST_CASE("attention: a query that sees no key gives zeros, not NaN", "[attention]") {
  manual_seed(1);
  Tensor q = randn({1, 3, 4}).set_requires_grad(true);
  Tensor k = randn({1, 5, 4}).set_requires_grad(true);
  Tensor v = randn({1, 5, 2}).set_requires_grad(true);
  Tensor mask = ones({3, 5}, DType::Bool);
  mask.select(0, 1).fill_(false);  // query 1 sees nothing
  Tensor out = scaled_dot_product_attention(q, k, v, mask);
  std::vector<float> o = out.to_vector<float>();
  CHECK(o[2] == 0.0f);
  CHECK(o[3] == 0.0f);
  sum(out).backward();
  for (const Tensor* t : {&q, &k, &v})
    for (float g : t->grad().to_vector<float>()) CHECK(std::isfinite(g));
  CHECK(q.grad().select(1, 1).to_vector<float>() == std::vector<float>(4, 0.0f));
}

TEST_CASE("attention: one autograd node, and gradients independent of thread count", "[attention]") {
  // A GEMM whose bits do not depend on the thread count: OpenBLAS's path where it qualifies.
  cpu::GemmBackendScope gemm(test::thread_independent_gemm());
  auto run = [](int threads) {
    cpu::set_num_threads(threads);
    manual_seed(2);
    // 2 x 3 entries of 3 blocks of query rows each (the CPU kernel's blocks are 64 rows).
    Tensor q = randn({2, 3, 150, 8}).set_requires_grad(true);
    Tensor k = randn({2, 3, 19, 8}).set_requires_grad(true);
    Tensor v = randn({2, 3, 19, 8}).set_requires_grad(true);
    Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.1, false);
    CHECK(out.grad_fn()->name() == "scaled_dot_product_attention");
    CHECK(out.grad_fn()->next_edges().size() == 3);
    sum(out * out).backward();
    std::vector<float> all = q.grad().to_vector<float>();
    for (const Tensor* t : {&k, &v}) {
      std::vector<float> g = t->grad().to_vector<float>();
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  test::ThreadCountGuard guard;
  std::vector<float> one = run(1), two = run(2), three = run(3);
  CHECK(one == two);
  CHECK(one == three);
}

TEST_CASE("attention: dropout keeps about 1 - p of the weights and is reproducible", "[attention]") {
  manual_seed(3);
  Tensor q = zeros({1, 64, 8}), k = zeros({1, 64, 8});  // uniform weights 1/64
  Tensor v = ones({1, 64, 1});
  Tensor a = scaled_dot_product_attention(q, k, v, Tensor(), 0.25);
  // Each output is (kept count / 64) / 0.75; its mean over 64 rows estimates 1.
  CHECK(mean(a).item<double>() == Approx(1.0).margin(0.05));
  manual_seed(3);
  Tensor b = scaled_dot_product_attention(q, k, v, Tensor(), 0.25);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  Tensor c = scaled_dot_product_attention(q, k, v, Tensor(), 0.25);
  CHECK(a.to_vector<float>() != c.to_vector<float>());
}
