// The CPU runner of the op test table: one Catch2 test case per row (so CTest lists each op),
// registered at start-up from the table itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <sstream>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

constexpr uint64_t kRandomSeed = 20261123;

std::string describe(const OpRow& row, const Sample& s, DType t) {
  return row.name + " / " + s.name + " / " + dtype_name(t);
}

// Compares out with ref: same shape; exact or within tolerance; NaN only against NaN.
std::string compare(const Tensor& out, const Tensor& ref, bool exact, Tolerance tol) {
  if (!out.defined() || !ref.defined()) return out.defined() == ref.defined() ? "" : "one output is undefined";
  if (out.sizes() != ref.sizes()) return "shape " + shape_str(out.sizes()) + " != reference " + shape_str(ref.sizes());
  std::vector<double> o = values(out), r = values(ref);
  for (size_t i = 0; i < o.size(); ++i) {
    bool ok;
    if (std::isnan(r[i])) {
      ok = std::isnan(o[i]);
    } else if (exact || std::isinf(r[i])) {
      ok = o[i] == r[i];
    } else {
      ok = std::fabs(o[i] - r[i]) <= tol.atol + tol.rtol * std::fabs(r[i]);
    }
    if (!ok) {
      std::ostringstream os;
      os << "element " << i << ": got " << o[i] << ", reference " << r[i];
      return os.str();
    }
  }
  return "";
}

TensorList to_float64(const TensorList& inputs) {
  TensorList r;
  for (const Tensor& t : inputs) r.push_back(t.defined() && t.is_floating_point() ? t.to(DType::Float64) : t);
  return r;
}

void check_forward(const OpRow& row) {
  for (DType t : row.dtypes) {
    for (const Sample& s : row.samples) {
      INFO(describe(row, s, t));
      TensorList in = s.make(t, Device::cpu());
      if (row.random) manual_seed(kRandomSeed);
      TensorList outs = row.op(in);
      if (row.random) manual_seed(kRandomSeed);
      TensorList refs = row.reference(to_float64(in));
      REQUIRE(outs.size() == refs.size());
      if (row.out_dtype) CHECK(dtype_name(outs[0].dtype()) == std::string(dtype_name(row.out_dtype(t))));
      auto tol_it = row.tolerance.find(t);
      Tolerance tol = tol_it != row.tolerance.end() ? tol_it->second : default_tolerance(t);
      for (size_t k = 0; k < outs.size(); ++k) {
        bool exact = !outs[k].is_floating_point() ||
                     std::find(row.exact_outputs.begin(), row.exact_outputs.end(), k) != row.exact_outputs.end();
        INFO("output " << k);
        CHECK(compare(outs[k], refs[k], exact, tol) == "");
      }
    }
  }
}

void check_gradients(const OpRow& row) {
  if (row.differentiable.empty()) return;
  for (const Sample& s : row.samples) {
    INFO(describe(row, s, DType::Float64) << " gradcheck");
    TensorList in = s.make(DType::Float64, Device::cpu());
    for (size_t i : row.differentiable) {
      REQUIRE(i < in.size());
      in[i].set_requires_grad(true);
    }
    auto fn = [&](const TensorList& x) {
      if (row.random) manual_seed(kRandomSeed);
      return row.op(x);
    };
    GradcheckResult r = gradcheck(fn, in);
    CHECK(r.message == "");
    CHECK(r.ok);
  }
}

void check_errors(const OpRow& row) {
  for (const ErrorCase& e : row.errors) {
    INFO(row.name << " error case: " << e.what);
    CHECK(expect_error(e) == "");
  }
}

void run_row(const OpRow& row) {
  CHECK(!row.samples.empty());
  check_forward(row);
  check_gradients(row);
  check_errors(row);
}

struct RowInvoker final : Catch::ITestInvoker {
  explicit RowInvoker(size_t i) : index(i) {}
  void invoke() const override { run_row(op_table()[index]); }
  size_t index;
};

// Registers "op table: <name>" for every row; names must outlive Catch's registry.
const bool registered = [] {
  static std::vector<std::string> names;
  const auto& table = op_table();
  names.reserve(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    names.push_back("op table: " + table[i].name);
    static std::vector<std::unique_ptr<Catch::AutoReg>> regs;
    regs.push_back(std::make_unique<Catch::AutoReg>(new RowInvoker(i), CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                                                    Catch::NameAndTags{names.back(), "[optable]"}));
  }
  return true;
}();

}  // namespace

TEST_CASE("op table: every row has samples, a reference and a unique name", "[optable]") {
  std::set<std::string> seen;
  for (const OpRow& row : op_table()) {
    INFO(row.name);
    CHECK(seen.insert(row.name).second);
    CHECK(!row.samples.empty());
    CHECK(!row.dtypes.empty());
    CHECK(static_cast<bool>(row.reference));
    CHECK(static_cast<bool>(row.op));
  }
  CHECK(op_table().size() >= 40);
}

}  // namespace kiln::test
