// The reduction kernels of kernels/cuda/reduce.cuh, their real source, run on the CPU through the
// emulator of CUDA's threads (kernels/simt/simt.h), planned and launched as kernels/cuda/reduce.cu
// does (make_params, one pass or two through a workspace, finish_params), and compared with the CPU
// kernel reduce_cpu: every ReduceOp, in float32, float16, bfloat16, float64, int32 and bool. The
// shapes reach each path of the plan: inner reductions read in 16-byte runs (aligned and not) or
// one element at a time, outer reductions (threads side by side over the outputs, the spare ones
// splitting the reduced range), reduced dims that do not merge, a full reduction of a transposed
// tensor, long rows in two passes, empty rows, and a grid capped below the output groups so that
// blocks loop. Max and min must give the CPU's values and indices (NaN wins, the lowest index among
// equals), integer and logical reductions its bits, float sums, means, products and variances agree
// within the rounding of their order. Outputs and the workspace lie between guard bands. Each case
// runs under both schedules, which must give the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/kiln.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/reduce.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::test;
namespace rc = kiln::reduction_cuda;

namespace {

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::ArgMax: return "argmax";
    case ReduceOp::ArgMin: return "argmin";
    case ReduceOp::Var: return "var";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Any: return "any";
    case ReduceOp::All: return "all";
  }
  return "?";
}

// The output dtype core gives each op.
DType out_dtype(ReduceOp op, DType in) {
  switch (op) {
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin: return DType::Int64;
    case ReduceOp::Any:
    case ReduceOp::All: return DType::Bool;
    case ReduceOp::Sum:
    case ReduceOp::Prod: return is_floating(in) ? in : DType::Int64;
    default: return in;
  }
}

// A reduction of x over `dims` into contiguous outputs between guard bands (and indices for max
// and min), with the arguments reduce_cuda and reduce_cpu take.
struct Problem {
  ReduceOp op;
  Tensor x;
  std::vector<int64_t> dims;
  bool with_indices = false;
  Shape out_shape;
  DType odt;
  ReduceArgs args;
  Guarded<unsigned char> out;
  Guarded<int64_t> idx;

  Problem(ReduceOp op_, const Tensor& x_, std::vector<int64_t> dims_, bool indices)
      : op(op_), x(x_), dims(std::move(dims_)), with_indices(indices), odt(out_dtype(op_, x_.dtype())),
        out(numel_out(x_, dims) * static_cast<int64_t>(element_size(odt))), idx(numel_out(x_, dims)) {
    std::vector<int64_t> kept_strides;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
        out_shape.push_back(x.sizes()[static_cast<size_t>(d)]);
        kept_strides.push_back(x.strides()[static_cast<size_t>(d)]);
      }
    }
    args.out.data = out.data();
    args.out.dtype = odt;
    args.out.ndim = static_cast<int>(out_shape.size());
    int64_t stride = 1;
    for (int d = args.out.ndim - 1; d >= 0; --d) {
      args.out.sizes[d] = out_shape[static_cast<size_t>(d)];
      args.out.strides[d] = stride;
      args.in_kept_strides[d] = kept_strides[static_cast<size_t>(d)];
      stride *= out_shape[static_cast<size_t>(d)];
    }
    if (with_indices) {
      args.indices = args.out;
      args.indices.data = idx.data();
      args.indices.dtype = DType::Int64;
    }
    args.in = x.data_ptr();
    args.in_dtype = x.dtype();
    for (const int64_t d : dims) {
      args.red_sizes[args.red_ndim] = x.sizes()[static_cast<size_t>(d)];
      args.red_strides[args.red_ndim] = x.strides()[static_cast<size_t>(d)];
      ++args.red_ndim;
    }
  }
  static int64_t numel_out(const Tensor& x, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) n *= x.sizes()[static_cast<size_t>(d)];
    }
    return n;
  }
  Tensor out_tensor() const {
    Tensor t = empty(out_shape, TensorOptions(odt));
    std::memcpy(t.data_ptr(), out.data(), static_cast<size_t>(t.numel()) * element_size(odt));
    return t;
  }
  Tensor idx_tensor() const {
    Tensor t = empty(out_shape, TensorOptions(DType::Int64));
    std::memcpy(t.data_ptr(), idx.data(), static_cast<size_t>(t.numel()) * sizeof(int64_t));
    return t;
  }
};

// What reduce.cu's launches did on the emulator: one pass or two.
struct Emulated {
  int64_t nchunks = 0;
  bool vec = false, r_fast = false;
};

// reduce_cuda on the emulator: the plan, pass 1 and with chunks pass 2, grids capped at max_blocks.
Emulated emulate(Problem& pb, simt::Schedule schedule, unsigned max_blocks) {
  const rc::ReduceParams p = rc::make_params(pb.op, pb.args);
  Emulated e{p.nchunks, p.vec > 0, p.r_fast};
  if (p.nout == 0) return e;
  rc::visit_policy(pb.op, pb.args.in_dtype, [&](auto tag) {
    using Policy = typename decltype(tag)::type;
    using Partial = typename Policy::Partial;
    const auto grid_x = [&](int64_t groups) { return static_cast<unsigned>(std::min<int64_t>(groups, max_blocks)); };
    simt::LaunchConfig cfg;
    cfg.block = simt::Dim3{static_cast<unsigned>(rc::kBlock), 1, 1};
    cfg.schedule = schedule;
    cfg.grid = simt::Dim3{grid_x(p.groups), static_cast<unsigned>(p.nchunks), 1};
    if (p.nchunks <= 1) {
      simt::launch(cfg, [&] { rc::reduce_kernel<Policy>(p, nullptr); });
      return;
    }
    Guarded<Partial> partials(static_cast<int64_t>(rc::partials_bytes<Policy>(p) / sizeof(Partial)));
    simt::launch(cfg, [&] { rc::reduce_kernel<Policy>(p, partials.data()); });
    const rc::ReduceParams q = rc::finish_params(p);
    cfg.grid = simt::Dim3{grid_x(q.groups), 1, 1};
    simt::launch(cfg, [&] { rc::reduce_finish_kernel<Policy>(q, partials.data()); });
    CHECK(partials.bands_intact());
  });
  return e;
}

// Whether two outputs hold the same values: equal, or NaN in the same places.
bool same_values(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
  if (va.size() != vb.size()) return false;
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) ? !std::isnan(vb[i]) : va[i] != vb[i]) return false;
  }
  return true;
}

// The reduction of x over `dims` on the emulator, under both schedules, compared with reduce_cpu.
// Returns the plan it took.
Emulated check(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, unsigned max_blocks = 1u << 20) {
  const bool indices = op == ReduceOp::Max || op == ReduceOp::Min;
  int64_t count = 1;
  for (const int64_t d : dims) count *= x.sizes()[static_cast<size_t>(d)];
  INFO(op_name(op) << " of " << dtype_name(x.dtype()) << " " << shape_str(x.sizes()) << " strides "
                   << shape_str(x.strides()) << " over " << shape_str(dims) << ", grid cap " << max_blocks);
  Problem want(op, x, dims, indices);
  reduce_cpu(op, want.args, KernelContext{});
  Problem low(op, x, dims, indices), high(op, x, dims, indices);
  const Emulated e = emulate(low, simt::Schedule::Lowest, max_blocks);
  emulate(high, simt::Schedule::Highest, max_blocks);
  CHECK((low.out.bands_intact() && low.idx.bands_intact()));
  CHECK(same_bits(low.out_tensor(), high.out_tensor()));
  const Tensor got = low.out_tensor(), ref = want.out_tensor();
  if (indices) CHECK(same_bits(low.idx_tensor(), want.idx_tensor()));
  const bool exact = !is_floating(want.odt) || op == ReduceOp::Max || op == ReduceOp::Min;
  if (exact) {
    CHECK(same_values(got, ref));
  } else {
    // Sums in another order: within a few units of float32 over the sum of magnitudes (float64
    // sums within float64's), and one rounding of the output dtype.
    const double unit = x.dtype() == DType::Float64 ? 1e-14 : 1e-5;
    const double out_eps = want.odt == DType::BFloat16 ? 1.0 / 128 : want.odt == DType::Float16 ? 1.0 / 1024 : unit;
    // The scale: the sum of magnitudes (of squares for a variance), per element for a mean.
    const Tensor x64 = x.to(DType::Float64);
    Tensor scale = op == ReduceOp::Var ? (x64 * x64).sum(dims) : x64.abs().sum(dims);
    if (op == ReduceOp::Mean || op == ReduceOp::Var) scale = scale / static_cast<double>(std::max<int64_t>(1, count));
    const double atol = (op == ReduceOp::Var ? 10 * unit : unit) * std::max(1.0, kiln::max(scale).item<double>());
    CHECK(worst_ratio(got, ref, atol, op == ReduceOp::Prod ? std::max(out_eps, 1e-4) : out_eps) <= 1.0);
  }
  return e;
}

constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,  ReduceOp::Min,  ReduceOp::ArgMax,
                                ReduceOp::ArgMin, ReduceOp::Var, ReduceOp::Prod, ReduceOp::Any, ReduceOp::All};

// Values for op: near 1 for products (so that they stay finite; -1, 1 or 2 in int32, whose
// products wrap), mostly zero for any and all, and otherwise signed multiples of a quarter (exact
// in every dtype) or of 1 in int32, with repeats so that max and min meet ties.
Tensor values(ReduceOp op, const Shape& shape, DType dt, uint64_t seed) {
  manual_seed(seed);
  int64_t n = 1;
  for (const int64_t s : shape) n *= s;
  std::vector<double> v = randn({n}).to_vector_double();
  for (double& e : v) {
    if (op == ReduceOp::Prod) {
      e = dt == DType::Int32 ? (e > 1.5 ? 2.0 : e < -1.5 ? -1.0 : 1.0) : 1.0 + 0.01 * e;
    } else if (op == ReduceOp::Any || op == ReduceOp::All) {
      e = e > 2.0 ? 1.0 : 0.0;
    } else {
      e = dt == DType::Int32 ? std::floor(e * 20.0) : std::floor(e * 8.0) * 0.25;
    }
  }
  return tensor(v, shape).to(dt);
}

}  // namespace

TEST_CASE("emulated: reduce kernels over inner contiguous rows, read in 16-byte runs or not", "[simt][reduce]") {
  for (const DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (const ReduceOp op : kAllOps) {
      // Rows of 1000: the run path, aligned (every row starts on 16 bytes in float32).
      const Tensor x = values(op, {6, 1000}, dt, 1);
      Emulated e = check(op, x, {1});
      CHECK(e.vec);
      CHECK(e.nchunks == 1);
      // The same rows one element past a 16-byte boundary: the unaligned loads of the run path.
      const Tensor wide = values(op, {6, 1001}, dt, 2);
      e = check(op, wide.narrow(1, 1, 1000), {1});
      CHECK(e.vec);
      // Long rows: two passes through the workspace.
      e = check(op, values(op, {2, 40001}, dt, 3), {1});
      CHECK(e.nchunks > 1);
      // Many short rows in a grid of 5 blocks: each block loops over the output groups.
      e = check(op, values(op, {3000, 9}, dt, 4), {1}, 5);
      CHECK(e.r_fast);
      // Rows that take several warps each (their merge goes through shared memory), in a grid of 3
      // blocks: the next group's partials must wait until this group's are merged.
      check(op, values(op, {40, 3000}, dt, 11), {1}, 3);
    }
  }
}

TEST_CASE("emulated: reduce kernels over outer and mixed dims, and a transposed tensor", "[simt][reduce]") {
  for (const DType dt : {DType::Float32, DType::BFloat16, DType::Float64, DType::Int32}) {
    for (const ReduceOp op : kAllOps) {
      if (dt == DType::Int32 && (op == ReduceOp::Mean || op == ReduceOp::Var)) continue;  // core rejects them
      // Columns: outputs side by side (5 of them, the spare threads split the 300 rows).
      Emulated e = check(op, values(op, {300, 5}, dt, 5), {0});
      CHECK(!e.r_fast);
      // Two reduced dims that do not merge into one (sizes 4 and 7 around a kept 6).
      e = check(op, values(op, {4, 6, 7}, dt, 6), {0, 2});
      CHECK(!e.vec);
      // Everything, of a transposed tensor: one output, reduced along strided columns first.
      check(op, values(op, {50, 61}, dt, 7).t(), {0, 1});
      // Outer reduction of many columns, two passes, and a capped grid.
      e = check(op, values(op, {3000, 3}, dt, 8), {0}, 2);
      CHECK(e.nchunks > 1);
    }
  }
}

TEST_CASE("emulated: reduce kernels with NaN, signed zeros, ties, empty rows and logical inputs", "[simt][reduce]") {
  for (const DType dt : {DType::Float32, DType::Float16}) {
    // A NaN in row 1 (late in the row, in the run path's tail), -0 and +0 in row 2, a tie in row 3.
    std::vector<double> v = values(ReduceOp::Max, {4, 1003}, DType::Float64, 9).to_vector_double();
    v[1 * 1003 + 1001] = NAN;
    v[1 * 1003 + 7] = NAN;
    for (int j = 0; j < 1003; ++j) v[static_cast<size_t>(2 * 1003 + j)] = j % 2 == 0 ? 0.0 : -0.0;
    v[3 * 1003 + 100] = v[3 * 1003 + 900] = 1e4;
    const Tensor x = tensor(v, {4, 1003}).to(dt);
    for (const ReduceOp op : kAllOps) {
      check(op, x, {1});
      check(op, x.t(), {0});
    }
  }
  // Empty rows: sums of nothing, means and variances of nothing.
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Var, ReduceOp::Prod, ReduceOp::Any,
                            ReduceOp::All}) {
    check(op, zeros({3, 0}), {1});
  }
  // Bool inputs for any and all; and every element of a float64 row tiny but not zero.
  for (const ReduceOp op : {ReduceOp::Any, ReduceOp::All}) {
    check(op, values(op, {7, 300}, DType::Bool, 10), {1});
    check(op, full({2, 40}, 1e-310, TensorOptions(DType::Float64)), {1});
  }
}
