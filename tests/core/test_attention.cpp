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

// No key at all (S = 0): every query sees none. The kernels were launched on the empty key and
// value tensors (pointer arithmetic on their null data: undefined behaviour, which the sanitized
// build reported); now the op writes the zero rows itself.
TEST_CASE("attention: no key at all gives zero rows and zero query gradients", "[attention]") {
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    Tensor q = randn({2, 3, 4}).set_requires_grad(true);
    Tensor k = zeros({2, 0, 4}).set_requires_grad(true);
    Tensor v = zeros({2, 0, 5}).set_requires_grad(true);
    const Tensor mask = causal ? Tensor() : zeros({3, 0}, DType::Bool);
    Tensor out = scaled_dot_product_attention(q, k, v, mask, 0.0, causal);
    CHECK(out.sizes() == Shape{2, 3, 5});
    CHECK(out.to_vector<float>() == std::vector<float>(30, 0.0f));
    sum(out).backward();
    CHECK(q.grad().to_vector<float>() == std::vector<float>(24, 0.0f));
    CHECK(k.grad().sizes() == Shape{2, 0, 4});
    CHECK(v.grad().sizes() == Shape{2, 0, 5});
  }
}

// One score of 200 (exp overflows float above 88) among zeros: the softmax is one-hot only when each
// row's maximum is taken over every key it sees. The key moves through all positions of a row of
// 21 (two 8-wide vector steps and a tail), and with causal it is the last key that row j sees.
TEST_CASE("attention: the row maximum covers every visible key", "[attention]") {
  constexpr int64_t n = 21;
  const Tensor q = ones({1, n, 1});
  const Tensor v = arange(0, n, 1, TensorOptions(DType::Float32)).reshape({1, n, 1});
  for (int64_t top = 0; top < n; ++top) {
    Tensor k = zeros({1, n, 1});
    k.select(1, top).fill_(200.0);
    for (const bool causal : {false, true}) {
      INFO("the high score at key " << top << (causal ? ", causal" : ""));
      const std::vector<float> out =
          scaled_dot_product_attention(q, k, v, Tensor(), 0.0, causal, 1.0).to_vector<float>();
      for (int64_t i = causal ? top : 0; i < n; ++i) {
        INFO("query " << i);
        REQUIRE(out[static_cast<size_t>(i)] == static_cast<float>(top));
      }
    }
  }
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

// The heads of a GPT block: q, k and v are [B, H, T, D] views of a fused [B, T, 3 * H * D]
// projection, and the output goes back to [B, T, H * D].
struct FusedHeads {
  Tensor q, k, v, out, y;
};
FusedHeads fused_heads(const Tensor& qkv, int64_t heads, bool causal) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3;
  TensorList parts = split(qkv, c, 2);
  auto view = [&](const Tensor& p) { return p.view({b, t, heads, c / heads}).transpose(1, 2); };
  FusedHeads f{view(parts[0]), view(parts[1]), view(parts[2]), Tensor(), Tensor()};
  f.out = scaled_dot_product_attention(f.q, f.k, f.v, Tensor(), 0.0, causal);
  f.y = f.out.transpose(1, 2).reshape({b, t, c});
  return f;
}

TEST_CASE("attention: a fused projection's heads cost no copies, forward or backward", "[attention]") {
  const bool causal = GENERATE(false, true);
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  CAPTURE(causal, dtype_name(dtype));
  manual_seed(3);
  const int64_t B = 2, T = 70, H = 3, D = 8, C = H * D;
  Tensor base = randn({B, T, 3 * C}).to(dtype).set_requires_grad(true);
  Tensor weights = randn({B, T, C}).to(dtype);

  // Fused: the output is [B, T, H, D] in memory, so the reshape back is a view of it.
  Tensor qkv = base * 1.0;  // a non-leaf, whose gradient a hook can see
  std::shared_ptr<Storage> dq_storage, qkv_grad_storage;
  Tensor qkv_grad;
  FusedHeads f = fused_heads(qkv, H, causal);
  f.q.register_hook([&](const Tensor& g) {
    dq_storage = g.storage();
    return Tensor();
  });
  qkv.register_hook([&](const Tensor& g) {
    qkv_grad = g;
    return Tensor();
  });
  CHECK(f.out.transpose(1, 2).is_contiguous());
  CHECK(f.y.storage() == f.out.storage());
  sum(f.y * weights).backward();

  // The same attention on contiguous copies of q, k and v: every layout a default one.
  Tensor base2 = base.detach().clone().set_requires_grad(true);
  TensorList parts = split(base2, C, 2);
  TensorList heads;
  for (const Tensor& p : parts) heads.push_back(p.view({B, T, H, D}).transpose(1, 2).contiguous());
  Tensor out2 = scaled_dot_product_attention(heads[0], heads[1], heads[2], Tensor(), 0.0, causal);
  CHECK(!out2.transpose(1, 2).is_contiguous());
  Tensor y2 = out2.transpose(1, 2).reshape({B, T, C});
  sum(y2 * weights).backward();

  // Same arithmetic, other layouts: the same bits.
  CHECK(f.y.to_vector<float>() == y2.to_vector<float>());
  CHECK(base.grad().to_vector<float>() == base2.grad().to_vector<float>());
  // dq, dk and dv were written into one buffer, which split's backward passed on whole.
  REQUIRE(qkv_grad.defined());
  REQUIRE(dq_storage);
  CHECK(qkv_grad.storage() == dq_storage);
  CHECK(qkv_grad.is_contiguous());
}

TEST_CASE("attention: gradients keep their inputs' layouts when q, k and v are not packed", "[attention]") {
  manual_seed(4);
  const int64_t B = 2, T = 9, H = 2, D = 4, C = H * D;
  Tensor base = randn({B, T, 3 * C}).set_requires_grad(true);
  TensorList parts = split(base * 1.0, C, 2);
  auto view = [&](const Tensor& p) { return p.view({B, T, H, D}).transpose(1, 2); };
  // k and q swapped: views of one buffer, but not in q, k, v order, so each gets its own buffer.
  Tensor q = view(parts[1]), k = view(parts[0]), v = view(parts[2]);
  std::vector<Tensor> seen(3);
  for (int i = 0; i < 3; ++i) {
    Tensor t = i == 0 ? q : i == 1 ? k : v;
    t.register_hook([&seen, i](const Tensor& g) {
      seen[static_cast<size_t>(i)] = g;
      return Tensor();
    });
  }
  Tensor w = randn({B, H, T, D});
  sum(scaled_dot_product_attention(q, k, v) * w).backward();
  Tensor ref = base.detach().clone().set_requires_grad(true);
  TensorList rp = split(ref, C, 2);
  Tensor q2 = view(rp[1]).contiguous(), k2 = view(rp[0]).contiguous(), v2 = view(rp[2]).contiguous();
  sum(scaled_dot_product_attention(q2, k2, v2) * w).backward();
  CHECK(base.grad().to_vector<float>() == ref.grad().to_vector<float>());
  for (const Tensor& g : seen) {
    REQUIRE(g.defined());
    // [B, H, T, D] gradients laid out as [B, T, H, D], like the inputs' order of dims.
    CHECK(g.transpose(1, 2).is_contiguous());
  }
  CHECK(seen[0].storage() != seen[1].storage());
  CHECK(seen[1].storage() != seen[2].storage());
}

// The backward computes no gradient for the mask, so a mask that asks for one is refused rather than
// left silently unlearned.
TEST_CASE("sdpa: a row of NaN scores gives NaN, not the zero row of a fully masked one", "[attention]") {
  // The row max skips NaN, so a row whose scores are all NaN looked fully masked: a zero output and
  // zero gradients hid the NaN from anything that checks for it.
  const Tensor k = full({1, 2, 3}, 0.25), v = arange(1, 7, 1, TensorOptions(DType::Float32)).reshape({1, 2, 3});
  auto first_row_nan_rest_finite = [](const Tensor& t) {
    const std::vector<float> x = t.to_vector<float>();
    bool ok = true;
    for (size_t i = 0; i < x.size(); ++i) ok = ok && (i < 3 ? std::isnan(x[i]) : std::isfinite(x[i]));
    return ok;
  };
  Tensor q = full({1, 2, 3}, 0.5);
  q.view({-1}).narrow(0, 0, 1).fill_(std::nan(""));  // query 0: every score NaN
  q.set_requires_grad(true);
  const Tensor out = scaled_dot_product_attention(q, k, v);
  CHECK(first_row_nan_rest_finite(out));
  sum(out).backward();
  CHECK(first_row_nan_rest_finite(q.grad()));
  // inf - inf scores, and a float mask row of NaN, the same.
  Tensor inf_row = full({1, 2, 3}, 0.5);
  inf_row.view({-1}).narrow(0, 0, 1).fill_(INFINITY);
  inf_row.view({-1}).narrow(0, 1, 1).fill_(-INFINITY);
  CHECK(first_row_nan_rest_finite(scaled_dot_product_attention(inf_row, k, v)));
  const Tensor mask = tensor(std::vector<float>{NAN, NAN, 0, 0}, {2, 2});
  CHECK(first_row_nan_rest_finite(scaled_dot_product_attention(full({1, 2, 3}, 0.5), k, v, mask)));
  // A fully masked row stays a zero row.
  const Tensor none = tensor(std::vector<float>{-INFINITY, -INFINITY, 0, 0}, {2, 2});
  CHECK(scaled_dot_product_attention(full({1, 2, 3}, 0.5), k, v, none).narrow(1, 0, 1).abs().sum().item<float>() ==
        0.0f);
}

TEST_CASE("sdpa: a float attn_mask that requires grad is refused", "[attention]") {
  Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 5, 4}), v = randn({1, 2, 5, 4});
  Tensor bias = zeros({3, 5}).set_requires_grad(true);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, bias), AutogradError);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, bias), Catch::Contains("attn_mask requires grad"));
  CHECK(scaled_dot_product_attention(q, k, v, bias.detach()).sizes() == Shape{1, 2, 3, 4});
  NoGradGuard no_grad;  // no graph recorded: nothing is lost
  CHECK_NOTHROW(scaled_dot_product_attention(q, k, v, bias));
}
