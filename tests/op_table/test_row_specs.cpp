// Invariants of the fields the op table's rows carry for other runners (docs/architecture.md §6):
// CUDA tolerance floors (each with its reason, none past a stated cap), bench specs (well formed, and
// the memory-bound ones run on the CPU at a small size, so a spec whose call does not fit its inputs
// fails here rather than on the GPU host), and each row family's files in the source tree.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// The loosest floor a row may give CUDA outputs, per output dtype. float32: rtol 1e-4 is three
// orders tighter than an indexing or formula bug, and atol 1e-3 is what a 70001-term float sum near
// zero needs. Another dtype has no floor yet: add its cap here, with the reason, before the first.
const std::map<DType, Tolerance>& floor_caps() {
  static const std::map<DType, Tolerance> caps = {{DType::Float32, {1e-3, 1e-4}}};
  return caps;
}

}  // namespace

TEST_CASE("op table: every CUDA tolerance floor has a reason and stays under its cap", "[optable]") {
  size_t with_floor = 0;
  for (const OpRow& row : op_table()) {
    INFO(row.name);
    const CudaTolerance& c = row.cuda_tolerance;
    // A reason without a floor is stale; a floor without one is what this field exists to prevent.
    CHECK(c.at_least.empty() == c.why.empty());
    if (!c.at_least.empty()) ++with_floor;
    for (const auto& [dtype, floor] : c.at_least) {
      INFO("floor for " << dtype_name(dtype) << " outputs: atol " << floor.atol << ", rtol " << floor.rtol);
      auto cap = floor_caps().find(dtype);
      REQUIRE(cap != floor_caps().end());
      CHECK(floor.atol <= cap->second.atol);
      CHECK(floor.rtol <= cap->second.rtol);
      // A floor that loosens nothing against the default is noise.
      const Tolerance d = default_tolerance(dtype);
      CHECK((floor.atol > d.atol || floor.rtol > d.rtol));
    }
  }
  CHECK(with_floor > 0);
}

TEST_CASE("op table: CUDA tolerances only loosen the CPU rule, and gradients are at least as loose", "[optable]") {
  const DType outs[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Int64};
  for (const OpRow& row : op_table()) {
    for (DType t : row.dtypes) {
      for (DType o : outs) {
        INFO(row.name << " / " << dtype_name(t) << " -> " << dtype_name(o));
        auto own = row.tolerance.find(t);
        const Tolerance cpu = own != row.tolerance.end() ? own->second : default_tolerance(is_floating(t) ? t : o);
        const Tolerance fwd = cuda_forward_tolerance(row, t, o), grad = cuda_gradient_tolerance(row, t, o);
        CHECK(fwd.atol >= cpu.atol);
        CHECK(fwd.rtol >= cpu.rtol);
        CHECK(grad.atol >= fwd.atol);
        CHECK(grad.rtol >= fwd.rtol);
      }
    }
  }
}

TEST_CASE("op table: bench specs are well formed and the memory-bound ones run", "[optable]") {
  size_t cases = 0;
  for (const OpRow& row : op_table()) {
    for (const BenchCase& b : row.bench) {
      INFO(row.name << " bench case " << b.name);
      CHECK(!b.name.empty());
      CHECK(!b.op.empty());
      CHECK((b.args.size() >= 2 && b.args.front() == '{' && b.args.back() == '}'));
      REQUIRE(static_cast<bool>(b.setup));
      REQUIRE(!b.dtypes.empty());
      for (DType t : b.dtypes) {
        INFO(dtype_name(t));
        ++cases;
        CHECK(std::find(row.dtypes.begin(), row.dtypes.end(), t) != row.dtypes.end());
        const BenchSetup s = b.setup(t, int64_t(1) << 26);
        CHECK(!s.shape.empty());
        REQUIRE(!s.inputs.empty());
        CHECK((s.flops > 0) == !s.precision.empty());
        CHECK((s.precision.empty() || s.precision == "bf16" || s.precision == "tf32"));
        if (s.flops == 0) CHECK((!s.tf32 && !s.ceiling));
        // Every input that is read is read at least once.
        double read = 0;
        for (const BenchInput& in : s.inputs) {
          if (in.fill != BenchInput::Fill::Empty)
            read += static_cast<double>(shape_numel(in.shape) * element_size(in.dtype));
        }
        CHECK(s.bytes >= read);
        if (s.flops > 0) continue;  // an 8192^3 matmul is no CPU test
        // The smallest size, on the CPU: the timed call accepts the inputs it is given.
        const BenchSetup small = b.setup(t, 1024);
        TensorList in;
        for (const BenchInput& i : small.inputs) {
          Tensor x = i.fill == BenchInput::Fill::Ones     ? ones(i.shape, TensorOptions(i.dtype))
                     : i.fill == BenchInput::Fill::Tokens ? randint(0, i.upper, i.shape)
                                                          : rnd(i.shape, i.dtype, Device::cpu(), 1);
          in.push_back(i.format == MemoryFormat::ChannelsLast ? x.contiguous(MemoryFormat::ChannelsLast) : x);
        }
        TensorList out = b.run ? b.run(in) : row.op(in);
        CHECK(!out.empty());
      }
    }
  }
  CHECK(cases > 0);
}

// A family names the stem of the op's files on every floor: its rows file and the op's core file
// must exist under that name, so a family registered under a name no file has (or a file renamed
// without its family) fails here. A family without rows is a rows file left empty.
TEST_CASE("op table: every row family has its rows file and its core/ops file", "[optable]") {
  const std::filesystem::path root(KILN_SOURCE_DIR);
  std::map<std::string, size_t> rows_of;
  for (const RowFamily& f : row_families()) {
    INFO("family " << f.family);
    CHECK(rows_of.emplace(f.family, 0).second);
    CHECK(std::filesystem::is_regular_file(root / "tests" / "op_table" / (std::string(f.family) + "_rows.cpp")));
    CHECK(std::filesystem::is_regular_file(root / "core" / "ops" / (std::string(f.family) + ".cpp")));
  }
  for (const OpRow& row : op_table()) {
    INFO(row.name << " of family " << row.family);
    REQUIRE(rows_of.count(row.family) == 1);
    ++rows_of[row.family];
  }
  for (const auto& [family, n] : rows_of) {
    INFO("family " << family);
    CHECK(n > 0);
  }
}

}  // namespace kiln::test
