// CPU attention in float16 and bfloat16 (kernels/cpu/attention.cpp) converts its operands to float32
// rows and runs the float32 code on them, so its results must be the float32 kernel's on the same
// values, rounded once to the dtype: bit for bit, forward and backward. The problems make the
// conversions' bookkeeping matter: several batch entries per task on one thread, row blocks that
// each convert only the keys the block before them did not (causal) or none at all (not causal),
// a fused projection's strided rows, dropout, and 1, 3 and 7 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/kiln.h"
#include "kernels/attention.h"
#include "kernels/cpu/parallel.h"
#include "tests/bitwise.h"
#include "tests/kernels/attention_simt.h"
#include "tests/threads.h"

using namespace kiln;

namespace {

struct Run {
  Tensor out, lse, dq, dk, dv;
};

// The CPU kernels on a problem's operands in dtype t; the backward reads `saved_out` (the forward's
// own output when undefined) converted to t.
Run run_cpu(const test::Problem& pr, DType t, const Tensor& saved_out = Tensor()) {
  const test::Operands in = test::operands(pr, t);
  const AttentionArgs& a = in.args;
  Run r;
  r.out = empty({a.batch, a.L, a.Ev}, TensorOptions(t));
  r.lse = empty({a.batch, a.L}, TensorOptions(DType::Float32));
  attention_forward_cpu(r.out.data_ptr(), r.lse.data_ptr(), in.q, in.k, in.v, a, KernelContext{});
  const Tensor out = saved_out.defined() ? saved_out.to(t) : r.out;
  r.dq = empty({a.batch, a.L, a.E}, TensorOptions(t));
  r.dk = empty({a.batch, a.S, a.E}, TensorOptions(t));
  r.dv = empty({a.batch, a.S, a.Ev}, TensorOptions(t));
  attention_backward_cpu(r.dq.data_ptr(), r.dk.data_ptr(), r.dv.data_ptr(), in.dout, out.data_ptr(),
                         r.lse.data_ptr(), in.q, in.k, in.v, a, KernelContext{});
  return r;
}

void check_widened(const test::Problem& pr, int threads) {
  const DType t = pr.args.dtype;
  INFO(dtype_name(t) << ", batch " << pr.args.batch << ", L " << pr.args.L << ", S " << pr.args.S
                     << (pr.args.causal ? ", causal" : "") << ", dropout " << pr.args.dropout_p << ", " << threads
                     << " threads");
  test::ThreadCountGuard guard;
  cpu::set_num_threads(threads);
  const Run half = run_cpu(pr, t);
  // float32 on the same values, its backward reading the rounded output the half backward read.
  const Run wide = run_cpu(pr, DType::Float32, half.out);
  CHECK(test::bitwise_equal(half.out, wide.out.to(t)));
  CHECK(test::bitwise_equal(half.lse, wide.lse));
  CHECK(test::bitwise_equal(half.dq, wide.dq.to(t)));
  CHECK(test::bitwise_equal(half.dk, wide.dk.to(t)));
  CHECK(test::bitwise_equal(half.dv, wide.dv.to(t)));
}

}  // namespace

TEST_CASE("attention on the CPU in float16 and bfloat16 is the float32 kernel on the widened values",
          "[attention]") {
  const DType t = GENERATE(DType::Float16, DType::BFloat16);
  for (int threads : {1, 3, 7}) {  // 7: fewer entries than threads, one task a row block
    // 2 x 3 entries of 150 rows (three row blocks), rows 3 * 3 * 8 apart.
    for (bool causal : {true, false}) {
      check_widened(test::fused_projection_problem(t, 2, 3, 150, 8, causal, 0.35), threads);
    }
    // Cross attention: 130 queries against 90 keys (rows past 90 see every key) and 70 against 200.
    check_widened(test::dense_problem(t, 8, 3, 130, 90, true, 0.35, 0.0, 4), threads);
    check_widened(test::dense_problem(t, 8, 3, 70, 200, false, 0.35, 0.1, 4), threads);
  }
}
