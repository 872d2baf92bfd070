// Autocast on the CPU: every op of the policy table (dtype and values against explicitly cast
// inputs), the parameter-cast cache, nesting and disabling, backward dtypes.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "tests/bitwise.h"
#include "tests/core/autocast_rows.h"

using namespace kiln;
using kiln::test::bitwise_equal;

TEST_CASE("autocast: every op of the policy table gives its dtype and the explicitly cast values", "[autocast]") {
  const std::vector<test::AutocastRow> rows = test::autocast_rows();
  // The rows and the table name the same ops: a new table entry needs a row here.
  std::set<std::string> in_rows, in_table;
  for (const auto& r : rows) in_rows.insert(r.op);
  for (const auto& r : autocast::policy_table()) in_table.insert(r.op);
  CHECK(in_rows == in_table);

  for (DType lp : {DType::BFloat16, DType::Float16}) {
    for (const auto& row : rows) {
      INFO(row.op << " under " << dtype_name(lp));
      manual_seed(7);
      const TensorList in = row.inputs(Device::cpu(), lp);
      Tensor got;
      {
        AutocastGuard guard(DeviceType::CPU, lp);
        got = row.call(in);
      }
      const DType want = row.out_dtype(lp);
      CHECK(got.dtype() == want);
      const Tensor expected = row.call(test::cast_floating(in, want));
      CHECK(bitwise_equal(got.detach(), expected));
      // Off, the op runs in its inputs' dtypes: the low-precision rows stay float32.
      if (want == lp) CHECK(row.call(in).dtype() == DType::Float32);
    }
  }
}

TEST_CASE("autocast: the table's policies are the documented ones", "[autocast]") {
  CHECK(autocast::policy_of("matmul") == autocast::Policy::LowPrecision);
  CHECK(autocast::policy_of("softmax") == autocast::Policy::Float32);
  CHECK(autocast::policy_of("cat") == autocast::Policy::Widest);
  CHECK(autocast::policy_of("cross_entropy") == autocast::Policy::Float32Result);
  CHECK_FALSE(autocast::policy_of("relu").has_value());
  CHECK_FALSE(autocast::policy_of("batch_norm").has_value());
}

TEST_CASE("autocast: cross_entropy reads low-precision logits as they are, with the float32 path's bits",
          "[autocast]") {
  CHECK(test::cross_entropy_float32_result_mismatches(Device::cpu()) == "");
  // The backward keeps the logits themselves: changing them in place first is refused.
  {
    Tensor x = randn({2, 5}).set_requires_grad(true);
    Tensor logits = (x * 2.0).to(DType::BFloat16);
    Tensor loss;
    {
      AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
      loss = cross_entropy(logits, tensor<int64_t>({1, 4}, {2}));
    }
    logits.add_(1.0);
    CHECK_THROWS_AS(loss.backward(), AutogradError);
  }
  // Outside autocast a bfloat16 loss stays bfloat16, as in PyTorch.
  CHECK(cross_entropy(randn({2, 5}).to(DType::BFloat16), tensor<int64_t>({1, 4}, {2})).dtype() == DType::BFloat16);
}

TEST_CASE("autocast: ops outside the table and float64 inputs are left alone", "[autocast]") {
  AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
  Tensor x = randn({3, 4});
  CHECK(relu(x).dtype() == DType::Float32);
  CHECK(gelu(x.to(DType::BFloat16)).dtype() == DType::BFloat16);
  Tensor a = randn({3, 4}, TensorOptions(DType::Float64)), b = randn({4, 2}, TensorOptions(DType::Float64));
  CHECK(matmul(a, b).dtype() == DType::Float64);
  CHECK(matmul(x, randn({4, 2})).dtype() == DType::BFloat16);
}

TEST_CASE("autocast: guards nest, disable and restore", "[autocast]") {
  Tensor a = randn({2, 3}), b = randn({3, 2});
  CHECK_FALSE(autocast_any_enabled());
  {
    AutocastGuard outer(DeviceType::CPU, DType::BFloat16);
    CHECK(autocast_state(DeviceType::CPU).enabled);
    CHECK(matmul(a, b).dtype() == DType::BFloat16);
    {
      AutocastGuard inner(DeviceType::CPU, DType::Float16);
      CHECK(matmul(a, b).dtype() == DType::Float16);
      {
        AutocastGuard off(DeviceType::CPU, false);
        CHECK_FALSE(autocast_state(DeviceType::CPU).enabled);
        CHECK(matmul(a, b).dtype() == DType::Float32);
      }
      CHECK(matmul(a, b).dtype() == DType::Float16);
    }
    CHECK(autocast_state(DeviceType::CPU).dtype == DType::BFloat16);
    CHECK(matmul(a, b).dtype() == DType::BFloat16);
    // CUDA's setting is separate: CPU tensors ignore it.
    AutocastGuard cuda_off(DeviceType::CUDA, false);
    CHECK(matmul(a, b).dtype() == DType::BFloat16);
  }
  CHECK_FALSE(autocast_any_enabled());
  CHECK(matmul(a, b).dtype() == DType::Float32);
  // A CUDA-only guard leaves CPU ops in float32.
  {
    AutocastGuard cuda(DeviceType::CUDA, DType::BFloat16);
    CHECK(autocast_state(DeviceType::CUDA).enabled);
    CHECK(matmul(a, b).dtype() == DType::Float32);
  }
  CHECK(autocast_default_dtype(DeviceType::CPU) == DType::BFloat16);
  CHECK(autocast_default_dtype(DeviceType::CUDA) == DType::Float16);
}

TEST_CASE("autocast: only float16 and bfloat16 are autocast dtypes", "[autocast]") {
  for (DType bad : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO(dtype_name(bad));
    CHECK_THROWS_AS(AutocastGuard(DeviceType::CPU, bad), DTypeError);
    CHECK_THROWS_WITH(AutocastGuard(DeviceType::CUDA, bad), Catch::Contains("float16 or bfloat16") &&
                                                              Catch::Contains(dtype_name(bad)));
  }
  CHECK_FALSE(autocast_any_enabled());  // a refused guard changed nothing
}

TEST_CASE("autocast: a parameter is cast once per region, and the cache empties on exit", "[autocast]") {
  Tensor w = randn({4, 4}).set_requires_grad(true);
  Tensor x = randn({2, 4});
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    Tensor y1 = linear(x, w);
    CHECK(autocast_cache_size() == 1);
    Tensor y2 = linear(y1, w);  // the same weight again: a cache hit
    CHECK(autocast_cache_size() == 1);
    CHECK(y1.grad_fn() != nullptr);
    {
      AutocastGuard nested(DeviceType::CPU, DType::BFloat16);
      Tensor y3 = linear(x, w);
      CHECK(autocast_cache_size() == 1);
    }
    CHECK(autocast_cache_size() == 1);  // an inner guard's exit keeps the outer region's casts
    // Non-parameters are not cached.
    Tensor nonleaf = w * 1.0;
    (void)linear(x, nonleaf);
    CHECK(autocast_cache_size() == 1);
    // An in-place update makes the cached cast stale: the next use casts again.
    Tensor before = linear(x, w);
    {
      NoGradGuard no_grad;
      w.mul_(2.0);
    }
    Tensor after = linear(x, w);
    CHECK_FALSE(bitwise_equal(before.detach(), after.detach()));
    CHECK(bitwise_equal(after.detach(), linear(x.to(DType::BFloat16), w.detach().to(DType::BFloat16))));
  }
  CHECK(autocast_cache_size() == 0);
}

TEST_CASE("autocast: a cast made without grad does not serve a forward with grad", "[autocast]") {
  Tensor w = randn({3, 3}).set_requires_grad(true);
  Tensor x = randn({2, 3});
  AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
  {
    NoGradGuard no_grad;
    CHECK(linear(x, w).grad_fn() == nullptr);
  }
  Tensor y = linear(x, w);
  REQUIRE(y.grad_fn() != nullptr);
  y.sum().backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::Float32);
}

TEST_CASE("autocast: backward runs in forward's dtypes and float32 parameters get float32 gradients",
          "[autocast]") {
  manual_seed(3);
  Tensor w = randn({5, 4}).set_requires_grad(true);
  Tensor b = randn({5}).set_requires_grad(true);
  Tensor x = randn({3, 4}).set_requires_grad(true);
  // Autocast, with backward called inside the region (the engine turns autocast off for it).
  Tensor loss;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    Tensor y = linear(x, w, b);
    CHECK(y.dtype() == DType::BFloat16);
    loss = softmax(y, 1).pow(2.0).sum();
    CHECK(loss.dtype() == DType::Float32);
    loss.backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::Float32);
  CHECK(b.grad().dtype() == DType::Float32);
  CHECK(x.grad().dtype() == DType::Float32);
  // The same computation cast by hand.
  Tensor w2 = w.detach().clone().set_requires_grad(true), b2 = b.detach().clone().set_requires_grad(true);
  Tensor x2 = x.detach().clone().set_requires_grad(true);
  const DType lp = DType::BFloat16;
  Tensor y2 = linear(x2.to(lp), w2.to(lp), b2.to(lp));
  Tensor loss2 = softmax(y2.to(DType::Float32), 1).pow(2.0).sum();
  loss2.backward();
  CHECK(bitwise_equal(loss.detach(), loss2.detach()));
  CHECK(bitwise_equal(w.grad(), w2.grad()));
  CHECK(bitwise_equal(b.grad(), b2.grad()));
  CHECK(bitwise_equal(x.grad(), x2.grad()));
}

TEST_CASE("autocast: docs/mixed-precision.md lists every row of the policy table with its policy", "[autocast]") {
  std::ifstream doc(std::string(KILN_SOURCE_DIR) + "/docs/mixed-precision.md");
  REQUIRE(doc.good());
  std::vector<std::string> table_lines;
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("| `", 0) == 0) table_lines.push_back(line);
  }
  for (const auto& row : autocast::policy_table()) {
    INFO(row.op);
    const char* word = row.policy == autocast::Policy::LowPrecision ? "| low precision |"
                       : row.policy == autocast::Policy::Float32    ? "| float32 |"
                       : row.policy == autocast::Policy::Float32Result ? "| float32 result |"
                                                                       : "| widest input |";
    const std::string name = std::string("`") + row.op + "`";
    bool found = false;
    for (const std::string& line : table_lines) {
      const size_t cell_end = line.find(" |", 2);
      const std::string first_cell = line.substr(0, cell_end);
      if (first_cell.find(name) != std::string::npos) found = line.find(word) != std::string::npos;
      if (found) break;
    }
    CHECK(found);
  }
}
