// CPU<->CUDA parity over the op test table (docs/architecture.md section 6): one Catch2 test case per
// row, "cuda parity: <row>". Inputs are copied to CUDA with their strides and storage offset intact,
// outputs are poisoned, backward runs from the same random cotangent, tolerances come from the row
// alone (cuda_forward_tolerance). Rows without a CUDA kernel sit in an explicit list and must still
// throw the missing-kernel DeviceError, so the list cannot go stale silently.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

constexpr uint64_t kRandomSeed = 20261123;    // as run_op_table.cpp: random rows reseed before each call
constexpr uint64_t kCotangentSeed = 71000;    // cotangent k uses kCotangentSeed + k on both devices
const char* const kNoKernel = "no CUDA kernel";  // what core/ops/dispatch.cpp's DeviceError says

// Rows whose op has no CUDA kernel yet: each must throw the "no CUDA kernel" DeviceError, and
// must come off this list when its kernel arrives. Every op of the table has one now.
const std::set<std::string>& rows_without_cuda_kernel() {
  static const std::set<std::string> rows = {};
  return rows;
}

bool expected_without_kernel(const OpRow& row) { return rows_without_cuda_kernel().count(row.name) > 0; }

// float64 exists for the CPU only (kernels/dtype.h): it backs gradcheck and the references.
bool on_cuda(DType t) { return t != DType::Float64; }

std::string describe(const OpRow& row, const Sample& s, DType t) {
  return row.name + " / " + s.name + " / " + dtype_name(t);
}

// --- moving inputs -------------------------------------------------------------------------------

// The last element a tensor reaches, relative to its storage offset (strides are never negative).
int64_t extent(const Tensor& t) {
  int64_t e = 0;
  for (int64_t d = 0; d < t.dim(); ++d) e += (t.size(d) - 1) * t.stride(d);
  return e;
}

// A CUDA copy of a CPU tensor with the same sizes, strides and storage offset: a non-contiguous,
// expanded or offset CPU input arrives on CUDA as the same kind of view, so kernels see the layout
// the row meant to test. A view is rebuilt over a CUDA buffer holding the bytes of the CPU storage
// up to the last element it reaches; a tensor that owns its storage becomes an empty_strided.
Tensor to_cuda_same_layout(const Tensor& t) {
  if (!t.defined()) return t;
  REQUIRE(t.is_cpu());
  NoGradGuard no_grad;
  const Device cuda = Device::cuda(0);
  const TensorOptions options(t.dtype(), cuda);
  if (t.numel() == 0) return empty_strided(t.sizes(), t.strides(), options);
  const size_t es = t.element_size();
  Tensor out;
  if (t.is_view() || t.storage_offset() != 0) {
    const int64_t span = t.storage_offset() + extent(t) + 1;
    Tensor buf = empty({span}, options);
    cuda::copy_bytes(buf.data_ptr(), cuda, t.storage()->data(), Device::cpu(), static_cast<size_t>(span) * es,
                     cuda::current_stream(), false);
    out = buf.as_strided(t.sizes(), t.strides(), t.storage_offset());
  } else {
    out = empty_strided(t.sizes(), t.strides(), options);
    cuda::copy_bytes(out.data_ptr(), cuda, t.data_ptr(), Device::cpu(), static_cast<size_t>(extent(t) + 1) * es,
                     cuda::current_stream(), false);
  }
  return out;
}

TensorList to_cuda_same_layout(const TensorList& in) {
  TensorList out;
  for (const Tensor& t : in) {
    Tensor c = to_cuda_same_layout(t);
    if (t.defined()) {
      INFO("input layout: cpu sizes " << shape_str(t.sizes()) << " strides " << shape_str(t.strides()) << " offset "
                                      << t.storage_offset() << ", cuda strides " << shape_str(c.strides())
                                      << " offset " << c.storage_offset());
      REQUIRE(c.is_cuda());
      REQUIRE(c.sizes() == t.sizes());
      REQUIRE(c.strides() == t.strides());
      REQUIRE(c.storage_offset() == t.storage_offset());
      REQUIRE(c.is_contiguous() == t.is_contiguous());
    }
    out.push_back(c);
  }
  return out;
}

// --- comparing -----------------------------------------------------------------------------------

// Strides of the dims that have more than one element: the only ones that say anything about layout.
Shape layout_of(const Tensor& t) {
  Shape s;
  for (int64_t d = 0; d < t.dim(); ++d) s.push_back(t.size(d) > 1 ? t.stride(d) : 0);
  return s;
}

// "" when `got` (from CUDA) matches `want` (from the CPU): both defined or neither, got on CUDA,
// same dtype, shape and layout, values exact or within tolerance, NaN only against NaN. Otherwise a
// message with the first and the worst mismatch, so a first GPU run says how far off a row is.
std::string compare(const Tensor& got, const Tensor& want, bool exact, Tolerance tol) {
  if (!got.defined() || !want.defined()) {
    return got.defined() == want.defined() ? "" : std::string("defined on ") + (got.defined() ? "cuda" : "cpu") + " only";
  }
  if (!got.is_cuda()) {
    return "the cuda result is on " + got.device().str() +
           ": the row's op does not follow its inputs' device (a factory row must pass x[0].device())";
  }
  if (got.dtype() != want.dtype()) {
    return std::string("dtype ") + dtype_name(got.dtype()) + " on cuda, " + dtype_name(want.dtype()) + " on cpu";
  }
  if (got.sizes() != want.sizes()) return "shape " + shape_str(got.sizes()) + " on cuda, " + shape_str(want.sizes()) + " on cpu";
  if (layout_of(got) != layout_of(want)) {
    return "layout differs: cuda strides " + shape_str(got.strides()) + ", cpu strides " + shape_str(want.strides());
  }
  std::vector<double> g = values(got), w = values(want);
  int64_t bad = 0, first = -1, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok;
    double excess = 0;
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      ok = std::isnan(w[i]) && std::isnan(g[i]);
      excess = ok ? 0 : std::numeric_limits<double>::infinity();
    } else if (exact || std::isinf(w[i]) || std::isinf(g[i])) {
      ok = g[i] == w[i];
      excess = ok ? 0 : std::numeric_limits<double>::infinity();
    } else {
      double allowed = tol.atol + tol.rtol * std::fabs(w[i]);
      double diff = std::fabs(g[i] - w[i]);
      ok = diff <= allowed;
      excess = diff / allowed;
    }
    if (!ok) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
      if (worst < 0 || excess > worst_excess) {
        worst = static_cast<int64_t>(i);
        worst_excess = excess;
      }
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(9);
  auto at = [&](int64_t i) {
    std::ostringstream e;
    e.precision(9);
    e << "element " << i << " " << shape_str(unravel(i, want.sizes())) << ": cuda " << g[static_cast<size_t>(i)]
      << ", cpu " << w[static_cast<size_t>(i)];
    return e.str();
  };
  os << bad << " of " << w.size() << " elements differ";
  if (exact) os << " (compared exactly)";
  else os << " (atol " << tol.atol << ", rtol " << tol.rtol << ")";
  os << "; first " << at(first);
  if (worst != first) os << "; worst " << at(worst);
  if (!exact && std::isfinite(worst_excess)) os << " (" << worst_excess << "x the allowance)";
  return os.str();
}

bool is_exact_output(const OpRow& row, const Tensor& t, size_t k) {
  return !t.is_floating_point() ||
         std::find(row.exact_outputs.begin(), row.exact_outputs.end(), k) != row.exact_outputs.end();
}

// Runs `fn` on CUDA and synchronizes, so that an asynchronous kernel error is raised here; "" when
// it ran, else what went wrong, naming the missing-kernel case plainly.
template <typename Fn> std::string run_on_cuda(Fn&& fn) {
  try {
    fn();
    cuda::synchronize();
    return "";
  } catch (const DeviceError& e) {
    std::string msg = e.what();
    if (msg.find(kNoKernel) != std::string::npos) {
      return "no CUDA kernel (" + msg + "); every row outside rows_without_cuda_kernel() must run on CUDA";
    }
    return std::string("DeviceError: ") + msg;
  } catch (const Error& e) {
    return std::string("kiln::Error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("non-kiln exception: ") + e.what();
  }
}

// Sets poisoned allocations for the scope: an output element a CUDA kernel forgot to write reads
// as NaN (floats) or all-ones bytes (integers) instead of a plausible leftover value.
struct PoisonGuard {
  PoisonGuard() { cuda::set_poison_allocations(true); }
  ~PoisonGuard() {
    const char* env = std::getenv("KILN_CUDA_POISON");
    cuda::set_poison_allocations(env && std::string(env) == "1");
  }
  PoisonGuard(const PoisonGuard&) = delete;
  PoisonGuard& operator=(const PoisonGuard&) = delete;
};

// --- one (row, sample, dtype) -------------------------------------------------------------------

// Checks one case; false when the op has no CUDA kernel, after which the row's other cases would
// only repeat that failure.
bool check_case(const OpRow& row, const Sample& s, DType t) {
  INFO(describe(row, s, t));
  TensorList cpu_in = s.make(t, Device::cpu());
  TensorList cuda_in = to_cuda_same_layout(cpu_in);

  // Differentiable floating inputs require grad on both devices before the forward, as gradcheck's.
  std::vector<size_t> diff;
  for (size_t i : row.differentiable) {
    REQUIRE(i < cpu_in.size());
    if (cpu_in[i].defined() && cpu_in[i].is_floating_point()) diff.push_back(i);
  }
  for (size_t i : diff) {
    cpu_in[i].set_requires_grad(true);
    cuda_in[i].set_requires_grad(true);
  }

  if (row.random) manual_seed(kRandomSeed);
  TensorList cpu_out = row.op(cpu_in);
  TensorList cuda_out;
  std::string err = run_on_cuda([&] {
    if (row.random) manual_seed(kRandomSeed);
    cuda_out = row.op(cuda_in);
  });
  if (!err.empty()) {
    bool missing = err.find(kNoKernel) != std::string::npos;
    FAIL_CHECK("forward on cuda: " << err << (missing ? " (the row's remaining dtypes and samples are not run)" : ""));
    return !missing;
  }
  REQUIRE(cuda_out.size() == cpu_out.size());
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    INFO("output " << k);
    bool exact = cpu_out[k].defined() && is_exact_output(row, cpu_out[k], k);
    Tolerance tol = cpu_out[k].defined() ? cuda_forward_tolerance(row, t, cpu_out[k].dtype()) : Tolerance{0, 0};
    CHECK(compare(cuda_out[k], cpu_out[k], exact, tol) == "");
  }

  // Backward from the same random cotangent for every floating output that carries a gradient.
  if (diff.empty()) return true;
  TensorList roots_cpu, roots_cuda, cot_cpu, cot_cuda, leaves_cpu, leaves_cuda;
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    const Tensor& o = cpu_out[k];
    if (!o.defined() || !o.is_floating_point() || !o.requires_grad()) continue;
    INFO("output " << k);
    REQUIRE(cuda_out[k].defined());
    CHECK(cuda_out[k].requires_grad());
    if (!cuda_out[k].requires_grad()) return true;
    Tensor c = rnd(o.sizes(), o.dtype(), Device::cpu(), kCotangentSeed + k);
    roots_cpu.push_back(o);
    roots_cuda.push_back(cuda_out[k]);
    cot_cpu.push_back(c);
    cot_cuda.push_back(to_cuda_same_layout(c));
  }
  if (roots_cpu.empty()) return true;
  for (size_t i : diff) {
    leaves_cpu.push_back(cpu_in[i]);
    leaves_cuda.push_back(cuda_in[i]);
  }
  if (row.random) manual_seed(kRandomSeed);
  TensorList g_cpu = grad(roots_cpu, leaves_cpu, cot_cpu, false, true);
  TensorList g_cuda;
  err = run_on_cuda([&] {
    if (row.random) manual_seed(kRandomSeed);
    g_cuda = grad(roots_cuda, leaves_cuda, cot_cuda, false, true);
  });
  if (!err.empty()) {
    FAIL_CHECK("backward on cuda: " << err);
    return true;
  }
  REQUIRE(g_cuda.size() == g_cpu.size());
  for (size_t j = 0; j < diff.size(); ++j) {
    INFO("gradient of input " << diff[j]);
    Tolerance tol = g_cpu[j].defined() ? cuda_gradient_tolerance(row, t, g_cpu[j].dtype()) : Tolerance{0, 0};
    // Gradients are not required to share a layout across devices: accumulation may hand back the
    // cotangent's layout or a fresh contiguous tensor, and either is correct.
    Tensor want = g_cpu[j].defined() ? g_cpu[j].contiguous() : g_cpu[j];
    Tensor got = g_cuda[j].defined() && g_cuda[j].is_cuda() ? g_cuda[j].contiguous() : g_cuda[j];
    CHECK(compare(got, want, false, tol) == "");
  }
  return true;
}

// A row expected to lack a CUDA kernel: every CUDA dtype and sample must throw the missing-kernel
// DeviceError. Anything else (it ran, or failed otherwise) fails with what to do about it.
void check_still_without_kernel(const OpRow& row) {
  for (DType t : row.dtypes) {
    if (!on_cuda(t)) continue;
    for (const Sample& s : row.samples) {
      INFO(describe(row, s, t));
      TensorList in = to_cuda_same_layout(s.make(t, Device::cpu()));
      std::string outcome;
      try {
        if (row.random) manual_seed(kRandomSeed);
        row.op(in);
        cuda::synchronize();
        outcome = "ran on CUDA without the expected \"" + std::string(kNoKernel) +
                  "\" DeviceError: its kernel has arrived, so take \"" + row.name +
                  "\" off rows_without_cuda_kernel() in tests/cuda/run_parity.cpp and let its parity be checked";
      } catch (const DeviceError& e) {
        std::string msg = e.what();
        if (msg.find(kNoKernel) == std::string::npos) outcome = "a DeviceError other than the missing kernel: " + msg;
      } catch (const std::exception& e) {
        outcome = std::string("expected the missing-kernel DeviceError, got: ") + e.what();
      }
      CHECK(outcome == "");
    }
  }
}

void run_row(const OpRow& row) {
  {
    INFO("cuda::is_available() is false: " << cuda::unavailable_reason());
    REQUIRE(cuda::is_available());
  }
  PoisonGuard poison;
  // Parity holds float32 to float32 accuracy: TF32 (on by default for cuDNN, as in PyTorch) would
  // round the inputs of conv and matmul to 10 mantissa bits, so it is off for the comparison.
  cuda::MathSwitches saved = cuda::math_switches();
  cuda::math_switches().allow_tf32_cudnn = false;
  cuda::math_switches().allow_tf32_matmul = false;
  struct Restore {
    cuda::MathSwitches s;
    ~Restore() { cuda::math_switches() = s; }
  } restore{saved};
  if (expected_without_kernel(row)) {
    check_still_without_kernel(row);
    return;
  }
  bool any = false;
  for (DType t : row.dtypes) {
    if (!on_cuda(t)) continue;
    any = true;
    for (const Sample& s : row.samples) {
      if (!check_case(row, s, t)) return;
    }
  }
  INFO(row.name << " lists no dtype that CUDA has (float64 is CPU-only)");
  CHECK(any);
}

struct RowInvoker final : Catch::ITestInvoker {
  explicit RowInvoker(size_t i) : index(i) {}
  void invoke() const override { run_row(op_table()[index]); }
  size_t index;
};

size_t g_registered = 0;

// Registers "cuda parity: <row>" for every row, as run_op_table.cpp does for the CPU runner; the
// names must outlive Catch's registry.
const bool registered = [] {
  static std::vector<std::string> names;
  static std::vector<std::unique_ptr<Catch::AutoReg>> regs;
  const auto& table = op_table();
  names.reserve(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    names.push_back("cuda parity: " + table[i].name);
    regs.push_back(std::make_unique<Catch::AutoReg>(new RowInvoker(i), CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                                                    Catch::NameAndTags{names.back(), "[cuda][parity]"}));
  }
  g_registered = table.size();
  return true;
}();

}  // namespace

// Needs no GPU: it checks the bookkeeping of this file against the table.
TEST_CASE("cuda: every op-table row is covered", "[cuda][parity]") {
  const auto& table = op_table();
  std::set<std::string> names;
  size_t parity = 0, without_kernel = 0;
  for (const OpRow& row : table) {
    names.insert(row.name);
    (expected_without_kernel(row) ? without_kernel : parity)++;
  }
  for (const std::string& listed : rows_without_cuda_kernel()) {
    INFO("rows_without_cuda_kernel() names \"" << listed << "\", which is not a row of the op table");
    CHECK(names.count(listed) == 1);
  }
  INFO(parity << " rows checked for parity, " << without_kernel << " expected to lack a CUDA kernel, "
              << table.size() << " rows in the table");
  CHECK(registered);
  CHECK(g_registered == table.size());
  CHECK(names.size() == table.size());  // unique names: each row is its own test case
  CHECK(parity + without_kernel == table.size());
  CHECK(without_kernel == rows_without_cuda_kernel().size());
  CHECK(parity > 0);
}

}  // namespace kiln::test
