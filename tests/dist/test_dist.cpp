// dist/ under mpirun (CTest runs this executable at 1, 2, 3 and 4 ranks): every collective against a
// serial reference each rank computes itself, kiln's ring against MPI's native all-reduce on odd
// element counts and world sizes (exactly for integers and for floats whose sums are exact; within
// float tolerance otherwise), point-to-point exchanges, and refusals that every rank makes alike
// before any byte moves (so a bad call fails everywhere instead of hanging half the ranks).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/kiln.h"
#include "dist/process_group.h"
#include "dist/ring.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::dist;

namespace {

// Rank r's value at element i: a multiple of 1/8 in [-6.25, 6.25], so sums over up to 8 ranks are
// exact in every float dtype, float16 and bfloat16 included (at most 8 significant bits). Products
// take factors from {-2, -1, -1/2, 1/2, 1, 2} (floats) or {1, 2, 3} (integers): exact over 8 ranks
// in every dtype (3^8 = 6561 fits int32; uint8 wraps, as the reference does).
double value(int r, int64_t i, DType dt, ReduceOp op) {
  if (op == ReduceOp::Product) {
    static const double kFactors[] = {-2.0, -1.0, -0.5, 0.5, 1.0, 2.0};
    return is_floating(dt) ? kFactors[(i * 7 + r * 13) % 6] : static_cast<double>((i + r) % 3 + 1);
  }
  return is_floating(dt) ? static_cast<double>((i * 7 + r * 13) % 101 - 50) / 8.0
                         : static_cast<double>((i * 7 + r * 13) % 101);
}

Tensor make(int r, int64_t n, DType dt, ReduceOp op = ReduceOp::Sum) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i, dt, op);
  return tensor(v, {n}, TensorOptions(DType::Float64)).to(dt);
}

// The reduction every rank expects, computed serially in float64 (exact for these values).
std::vector<double> reference(int ranks, int64_t n, DType dt, ReduceOp op) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = value(0, i, dt, op);
    for (int r = 1; r < ranks; ++r) {
      const double v = value(r, i, dt, op);
      switch (op) {
        case ReduceOp::Max: acc = std::max(acc, v); break;
        case ReduceOp::Min: acc = std::min(acc, v); break;
        case ReduceOp::Product: acc *= v; break;
        case ReduceOp::Sum:
        case ReduceOp::Avg: acc += v; break;
      }
    }
    if (op == ReduceOp::Avg) acc /= ranks;
    if (dt == DType::UInt8) acc = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(acc)));
    out[static_cast<size_t>(i)] = acc;
  }
  return out;
}

std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

}  // namespace

TEST_CASE("dist: the world group", "[dist]") {
  REQUIRE(mpi_available());
  ProcessGroup& g = world();
  CHECK(g.backend() == "mpi");
  CHECK(g.size() >= 1);
  CHECK(g.rank() >= 0);
  CHECK(g.rank() < g.size());
  // Every rank agrees on the size: the sum of ones is the size.
  Tensor one = ones({1}, TensorOptions(DType::Int64));
  g.all_reduce(one)->wait();
  CHECK(one.item<int64_t>() == g.size());
}

TEST_CASE("dist: all_reduce, native and ring, every dtype and op, against a serial reference", "[dist]") {
  ProcessGroup& g = world();
  const std::vector<int64_t> counts{0, 1, 2, 3, 5, 7, 64, 1000, 4099};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                   DType::UInt8}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product, ReduceOp::Avg}) {
      if (op == ReduceOp::Avg && !is_floating(dt)) continue;
      for (AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
        for (int64_t n : counts) {
          INFO(dtype_name(dt) << " " << reduce_op_name(op) << " " << all_reduce_algo_name(algo) << " n=" << n
                              << " ranks=" << g.size());
          Tensor t = make(g.rank(), n, dt, op);
          g.all_reduce(t, op, algo)->wait();
          std::vector<double> want = reference(g.size(), n, dt, op);
          if (op == ReduceOp::Avg) {  // the one division rounds in the tensor's dtype
            Tensor w = tensor(want, {n}, TensorOptions(DType::Float64)).to(dt);
            want = values(w);
          }
          if (op == ReduceOp::Avg && dt == DType::Float16) {
            // Each rank's value divided first, rounded to float16, then summed: within an ulp or two.
            const std::vector<double> got = values(t);
            double worst = 0.0;
            for (size_t i = 0; i < got.size(); ++i) worst = test::worse(worst, std::abs(got[i] - want[i]));
            CHECK(worst <= 2.0 * 6.25 / 1024);
          } else {
            CHECK(values(t) == want);
          }
        }
      }
    }
  }
}

TEST_CASE("dist: a float16 average that fits is not lost to a sum that does not", "[dist]") {
  // 40000 on every rank: the sum passes float16's largest value (65504) from two ranks on, the
  // average is 40000. Each rank divides first (as NCCL's average does), in all_reduce (native and
  // ring) and reduce_scatter.
  ProcessGroup& g = world();
  const std::vector<double> want(6, 40000.0);
  for (const AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
    INFO("ranks " << g.size() << ", " << all_reduce_algo_name(algo));
    Tensor t = full({6}, 40000.0, TensorOptions(DType::Float16));
    g.all_reduce(t, ReduceOp::Avg, algo)->wait();
    CHECK(values(t) == want);
  }
  Tensor in = full({6 * g.size()}, 40000.0, TensorOptions(DType::Float16)), out = zeros({6}, DType::Float16);
  const Tensor in_before = in.clone();
  g.reduce_scatter(out, in, ReduceOp::Avg)->wait();
  CHECK(values(out) == want);
  CHECK(values(in) == values(in_before));  // the input is read, not divided in place
  // An average of ints is refused by name, with the dtype.
  Tensor ints = zeros({g.size()}, TensorOptions(DType::Int64)), one_int = zeros({1}, TensorOptions(DType::Int64));
  CHECK_THROWS_WITH(g.reduce_scatter(one_int, ints, ReduceOp::Avg),
                    Catch::Contains("reduce_scatter: avg of int64 tensors is not supported"));
}

TEST_CASE("dist: a maximum or minimum is NaN when any rank's is, whichever rank holds it", "[dist]") {
  // MPI's own MAX and MIN keep or drop a NaN depending on the operand it sits in; kiln's, as
  // PyTorch's, propagate it (ZeRO's infinity-norm clip relies on that).
  ProcessGroup& g = world();
  for (int holder = 0; holder < g.size(); ++holder) {
    for (const DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
      for (const ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
        for (const AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
          INFO("ranks " << g.size() << ", NaN on rank " << holder << ", " << dtype_name(dt) << ", "
                        << reduce_op_name(op) << ", " << all_reduce_algo_name(algo));
          Tensor t = full({3}, 1.0 + g.rank(), TensorOptions(dt));
          if (g.rank() == holder) t.fill_(Scalar(std::nan("")));
          g.all_reduce(t, op, algo)->wait();
          for (const double v : t.to(DType::Float64).to_vector<double>()) CHECK(std::isnan(v));
        }
      }
    }
  }
}

TEST_CASE("dist: bool tensors reduce to any (sum, max) and all (product, min), as PyTorch's", "[dist]") {
  // Element k is true on rank r when bit r of k is set, for k < 2^size: element 0 is false on every
  // rank, the last true on every rank, the rest mixed. No bool collective was supported before.
  ProcessGroup& g = world();
  const int64_t n = int64_t{1} << g.size();
  std::vector<double> mine(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) mine[static_cast<size_t>(k)] = (k >> g.rank()) & 1;
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Product, ReduceOp::Min}) {
    const bool any = op == ReduceOp::Sum || op == ReduceOp::Max;
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) want[static_cast<size_t>(k)] = any ? k != 0 : k == n - 1;
    for (const AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
      INFO("ranks " << g.size() << ", " << reduce_op_name(op) << ", " << all_reduce_algo_name(algo));
      Tensor t = tensor(mine, {n}, TensorOptions(DType::Float64)).to(DType::Bool);
      g.all_reduce(t, op, algo)->wait();
      CHECK(t.dtype() == DType::Bool);
      CHECK(values(t) == want);
    }
    // reduce_scatter: rank r's share of `per` elements from every rank's [size x per] input.
    const int64_t per = 2;
    std::vector<double> in(static_cast<size_t>(per * g.size()));
    for (size_t k = 0; k < in.size(); ++k) in[k] = (static_cast<int64_t>(k) + g.rank()) % 2;  // mixed
    Tensor out = zeros({per}, DType::Bool);
    g.reduce_scatter(out, tensor(in, {per * g.size()}, TensorOptions(DType::Float64)).to(DType::Bool), op)->wait();
    const bool mixed = g.size() > 1;  // one rank alone gives its own values back
    for (int64_t j = 0; j < per; ++j) {
      const double own = static_cast<double>((g.rank() * per + j + g.rank()) % 2);
      INFO("reduce_scatter " << reduce_op_name(op) << " element " << j);
      CHECK(values(out)[static_cast<size_t>(j)] == (mixed ? (any ? 1.0 : 0.0) : own));
    }
  }
  Tensor flags = zeros({2}, DType::Bool);
  CHECK_THROWS_WITH(g.all_reduce(flags, ReduceOp::Avg), Catch::Contains("all_reduce: avg of bool tensors"));
}

TEST_CASE("dist: the ring equals the native all-reduce on random floats, in small pieces", "[dist]") {
  ProcessGroup& g = world();
  for (int64_t n : {1, 17, 1001, 30011}) {
    manual_seed(100 + static_cast<uint64_t>(g.rank()));
    Tensor a = randn({n});
    Tensor b = a.clone(), c = a.clone();
    g.all_reduce(a, ReduceOp::Sum, AllReduceAlgo::Native)->wait();
    g.all_reduce(b, ReduceOp::Sum, AllReduceAlgo::Ring)->wait();
    ring_all_reduce(g, c, ReduceOp::Sum, /*piece_bytes=*/12);  // 3 floats a piece: many pieces, a short last
    const double err = max(abs(a - b)).item<double>(), err_c = max(abs(a - c)).item<double>();
    INFO("n=" << n << " ranks=" << g.size());
    CHECK(err <= 1e-5);  // another summation order
    CHECK(err_c <= 1e-5);
    // The ring's sum is the same on every rank: rank 0's copy, broadcast, matches bit for bit.
    Tensor from0 = b.clone();
    g.broadcast(from0, 0)->wait();
    CHECK(max(abs(from0 - b)).item<double>() == 0.0);
  }
}

TEST_CASE("dist: ring segments cover the tensor, longest first", "[dist]") {
  for (int n = 1; n <= 7; ++n) {
    for (int64_t numel : {0, 1, 6, 7, 8, 100}) {
      int64_t next = 0;
      for (int k = 0; k < n; ++k) {
        const Segment s = ring_segment(numel, n, k);
        CHECK(s.begin == next);
        CHECK(s.end - s.begin <= ring_segment(numel, n, 0).end);
        CHECK(s.end - s.begin >= numel / n);
        next = s.end;
      }
      CHECK(next == numel);
    }
  }
}

TEST_CASE("dist: reduce_scatter, all_gather, broadcast, barrier", "[dist]") {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  const int64_t per = 5;
  // reduce_scatter: rank r gets the sum of everyone's slice r.
  Tensor in = make(r, per * n, DType::Float32), out = zeros({per});
  g.reduce_scatter(out, in, ReduceOp::Sum)->wait();
  const std::vector<double> full = reference(n, per * n, DType::Float32, ReduceOp::Sum);
  CHECK(values(out) == std::vector<double>(full.begin() + r * per, full.begin() + (r + 1) * per));
  // all_gather: every rank's input in rank order.
  Tensor mine = full_like(zeros({3}, TensorOptions(DType::Int64)), r + 1);
  Tensor all = zeros({3 * n}, TensorOptions(DType::Int64));
  g.all_gather(all, mine)->wait();
  std::vector<int64_t> expect;
  for (int k = 0; k < n; ++k) expect.insert(expect.end(), 3, k + 1);
  CHECK(all.to_vector<int64_t>() == expect);
  // broadcast from the last rank.
  Tensor b = full_like(zeros({4}), static_cast<double>(r));
  g.broadcast(b, n - 1)->wait();
  CHECK(b.to_vector<float>() == std::vector<float>(4, static_cast<float>(n - 1)));
  g.barrier();
}

TEST_CASE("dist: collectives are asynchronous: the call returns before the other ranks join", "[dist][async]") {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  if (n == 1) return;
  // Rank 1 joins the all-reduce only after a message that rank 0 sends once its own all-reduce call
  // has returned: a blocking all-reduce would deadlock here.
  for (AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
    INFO(all_reduce_algo_name(algo));
    Tensor t = full_like(zeros({1000}), static_cast<double>(r + 1));
    Tensor go = zeros({1});
    if (r == 1) g.recv(go, 0, 11);
    std::shared_ptr<Work> w = g.all_reduce(t, ReduceOp::Sum, algo);
    if (r == 0) {
      CHECK_FALSE(w->completed());  // rank 1 has not joined yet: it cannot be done
      g.send(go, 1, 11);
    }
    w->wait();
    CHECK(w->completed());
    CHECK(t.to_vector<float>() == std::vector<float>(1000, static_cast<float>(n * (n + 1) / 2)));
  }
  // Collectives run in the order they were issued: a reduce-scatter issued after an all-reduce of
  // its input reads the reduced values.
  Tensor a = full_like(zeros({static_cast<int64_t>(2 * n)}), 1.0), part = zeros({2});
  std::shared_ptr<Work> w1 = g.all_reduce(a);
  std::shared_ptr<Work> w2 = g.reduce_scatter(part, a);
  w2->wait();
  w1->wait();
  CHECK(part.to_vector<float>() == std::vector<float>(2, static_cast<float>(n * n)));
}

// A channels-last gradient or weight (tip 15) in a hand-written all-reduce loop: kiln refused every
// tensor that was not row-major. The ranks' elements pair by their place in memory, which is the
// same element on every rank when the ranks share the layout.
TEST_CASE("dist: all_reduce, broadcast and point to point take any dense layout, in place", "[dist]") {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  auto rank_values = [](int rank) { return arange(0, 120, 1, DType::Float32).view({2, 3, 4, 5}) * (rank + 1.0); };
  for (const AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
    INFO("ranks " << n << ", " << all_reduce_algo_name(algo));
    Tensor x = rank_values(r).contiguous(MemoryFormat::ChannelsLast);
    const void* where = x.data_ptr();
    g.all_reduce(x, ReduceOp::Sum, algo)->wait();
    CHECK(x.data_ptr() == where);
    CHECK(x.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(values(x) == values(rank_values(0) * (n * (n + 1) / 2.0)));
    // float16's average divides each rank's tensor first: in place too. Within float16's rounding
    // of the exact average (the backends reduce each part of the block in its own rank order, so
    // the last bit depends on an element's place in memory, as NCCL's does).
    Tensor avg = rank_values(r).to(DType::Float16).contiguous(MemoryFormat::ChannelsLast);
    g.all_reduce(avg, ReduceOp::Avg, algo)->wait();
    const Tensor exact = rank_values(0).to(DType::Float64) * ((n + 1) / 2.0);
    CHECK(max(abs(avg.to(DType::Float64) - exact) / (exact + 1.0)).item<double>() <= std::ldexp(1.0, -9));
  }
  // A transposed matrix, broadcast from the last rank.
  Tensor m = (arange(0, 12, 1, DType::Float64).view({3, 4}) + 100.0 * r).t();
  g.broadcast(m, n - 1)->wait();
  CHECK(values(m) == values((arange(0, 12, 1, DType::Float64).view({3, 4}) + 100.0 * (n - 1)).t()));
  // Around the ring: a channels-last tensor sent, received into another.
  Tensor out = rank_values(r).contiguous(MemoryFormat::ChannelsLast);
  Tensor in = zeros({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  g.send_recv(out, (r + 1) % n, in, (r + n - 1) % n);
  CHECK(values(in) == values(rank_values((r + n - 1) % n)));
}

TEST_CASE("dist: point to point around the ring", "[dist]") {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  Tensor out = full_like(zeros({1000}, TensorOptions(DType::Int32)), r), in = zeros({1000}, TensorOptions(DType::Int32));
  g.send_recv(out, (r + 1) % n, in, (r + n - 1) % n, 3);
  CHECK(in.to_vector<int32_t>() == std::vector<int32_t>(1000, (r + n - 1) % n));
  if (n > 1) {  // blocking send and recv: rank 0 to the last rank, never both ways at once
    Tensor msg = full_like(zeros({2}), 7.5);
    if (r == 0) g.send(msg, n - 1, 9);
    if (r == n - 1) {
      Tensor got = zeros({2});
      g.recv(got, 0, 9);
      CHECK(got.to_vector<float>() == std::vector<float>{7.5f, 7.5f});
    }
  }
}

TEST_CASE("dist: float16 averages read their tensors in issue order, after the collectives before them", "[dist]") {
  // float16's average divides first; that division (and reduce_scatter's copy of its input) ran on
  // the caller's thread at issue time, ahead of an earlier collective still queued on the same
  // tensor. One rank holds back so that the earlier one is still in flight on the others.
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  if (n == 1) return;
  for (DType dt : {DType::Float32, DType::Float16}) {
    INFO(dtype_name(dt));
    Tensor in = full({2 * n}, Scalar(r + 1.0), TensorOptions(dt)), out = zeros({2}, TensorOptions(dt));
    if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto summed = g.all_reduce(in, ReduceOp::Sum);
    auto averaged = g.reduce_scatter(out, in, ReduceOp::Avg);
    summed->wait();
    averaged->wait();
    CHECK(out.to_vector_double() == std::vector<double>(2, n * (n + 1) / 2.0));  // the average of equal sums
    Tensor t = full({4096}, Scalar(r + 1.0), TensorOptions(dt));
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto from_root = g.broadcast(t, 0);
    auto avg = g.all_reduce(t, ReduceOp::Avg);
    from_root->wait();
    avg->wait();
    CHECK(t.to_vector_double() == std::vector<double>(4096, 1.0));  // rank 0's ones, averaged
  }
}

TEST_CASE("dist: all_gather and reduce_scatter with input and output in one buffer", "[dist]") {
  // MPI requires the two apart: this rank's slot goes in place, any other shared input is copied
  // first (rank 1 of 2 gathered wrong values from an input in rank 0's slot).
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  std::vector<double> want(static_cast<size_t>(4 * n));
  for (int k = 0; k < n; ++k) std::fill_n(want.begin() + 4 * k, 4, k + 1.0);
  for (int slot : {r, 0, n - 1}) {
    INFO("input in slot " << slot);
    Tensor buffer = zeros({4 * n});
    Tensor input = buffer.narrow(0, 4 * slot, 4);
    input.fill_(r + 1.0);
    g.all_gather(buffer, input)->wait();
    CHECK(buffer.to_vector_double() == want);
  }
  for (int slot : {r, 0}) {
    INFO("output in slot " << slot);
    Tensor buffer = full({2 * n}, Scalar(r + 1.0));
    Tensor output = buffer.narrow(0, 2 * slot, 2);
    g.reduce_scatter(output, buffer, ReduceOp::Sum)->wait();
    CHECK(output.to_vector_double() == std::vector<double>(2, n * (n + 1) / 2.0));
  }
}

TEST_CASE("dist: bad calls are refused on every rank before any byte moves", "[dist]") {
  ProcessGroup& g = world();
  Tensor strided = zeros({4, 8}).narrow(1, 0, 4);  // rows 8 apart: not one block
  CHECK_THROWS_WITH(g.all_reduce(strided),
                    Catch::Contains("all_reduce: the tensor [4, 4] with strides [8, 1] must be dense"));
  CHECK_THROWS_WITH(g.broadcast(strided, 0), Catch::Contains("broadcast: the tensor [4, 4]"));
  // reduce_scatter and all_gather cut rank slots from the row-major order: a transposed tensor,
  // dense as it is, would scatter its columns.
  Tensor slots = zeros({2 * g.size(), 2}).t(), slot = zeros({4});
  CHECK_THROWS_WITH(g.all_gather(slots, slot),
                    Catch::Contains("all_gather: the tensor [2, " + std::to_string(2 * g.size()) + "]") &&
                        Catch::Contains("must be contiguous"));
  CHECK_THROWS_WITH(g.reduce_scatter(slot, slots), Catch::Contains("pass .contiguous()"));
  Tensor ints = zeros({3}, TensorOptions(DType::Int64));
  CHECK_THROWS_AS(g.all_reduce(ints, ReduceOp::Avg), DTypeError);
  Tensor flags = zeros({3}, TensorOptions(DType::Bool));
  CHECK_THROWS_AS(g.all_reduce(flags, ReduceOp::Avg), DTypeError);  // a bool sum is "any", an average nothing
  Tensor undefined;
  CHECK_THROWS_WITH(g.all_reduce(undefined), Catch::Contains("undefined"));
  Tensor x = zeros({2});
  CHECK_THROWS_AS(g.broadcast(x, g.size()), IndexError);
  CHECK_THROWS_AS(g.broadcast(x, -1), IndexError);
  Tensor small = zeros({1}), big = zeros({g.size() * 2 + 1});
  CHECK_THROWS_AS(g.reduce_scatter(small, big), ShapeError);
  Tensor gathered = zeros({g.size() + 1});
  CHECK_THROWS_WITH(g.all_gather(gathered, small), Catch::Contains("all_gather: output has"));
  Tensor i32 = zeros({g.size()}, TensorOptions(DType::Int32));
  CHECK_THROWS_AS(g.all_gather(i32, small), DTypeError);
  CHECK_THROWS_AS(g.send(x, g.size()), IndexError);
  CHECK_THROWS_WITH(g.send(x, 0, 40000), Catch::Contains("tag must be in [0, 32766]"));
  CHECK_THROWS_WITH(g.send(x, 0, 32767), Catch::Contains("the ring all-reduce's own"));
  // An exchange checks both sides before it posts either: a receive posted before its send's
  // error waited KILN_DIST_TIMEOUT for a message that never came, and broke the group.
  Tensor sparse = zeros({2, 4}).narrow(1, 0, 2), inbox = zeros({2, 2});
  CHECK_THROWS_WITH(g.send_recv(sparse, 0, inbox, 0), Catch::Contains("isend") && Catch::Contains("must be dense"));
  CHECK_THROWS_AS(g.send_recv(inbox, g.size(), inbox, 0), IndexError);
  g.barrier();  // every rank got here: none is stuck in a collective another refused
  Tensor after = ones({3});
  g.all_reduce(after)->wait();  // the group still works
  CHECK(after.to_vector<float>() == std::vector<float>(3, static_cast<float>(g.size())));
}

// Hidden: CTest runs these under KILN_DIST_DEBUG=1 at 2 and 3 ranks (dist_debug_ranks_N), where the
// ranks' calls are compared before each collective. Every rank throws alike, and the group stays
// usable: the mismatched collective was never issued.
TEST_CASE("dist: under KILN_DIST_DEBUG=1 calls that differ across ranks are an Error on every rank", "[.dist_debug]") {
  REQUIRE(dist_debug());
  ProcessGroup& g = world();
  REQUIRE(g.size() >= 2);
  const int r = g.rank();
  const bool odd_one = r == g.size() - 1;
  {
    Tensor t = ones({odd_one ? 5 : 4});
    CHECK_THROWS_WITH(g.all_reduce(t), Catch::Contains("all_reduce: the ranks' calls differ") &&
                                           Catch::Contains("rank 0: collective") &&
                                           Catch::Contains("all_reduce of 4 float32 elements, sum, native") &&
                                           Catch::Contains("all_reduce of 5 float32 elements, sum, native"));
    CHECK(values(t) == std::vector<double>(odd_one ? 5 : 4, 1.0));  // untouched
  }
  {
    Tensor t = ones({3}, odd_one ? DType::Float64 : DType::Float32);
    CHECK_THROWS_WITH(g.broadcast(t, 0), Catch::Contains("broadcast of 3 float64 elements from root 0"));
    Tensor u = ones({3});
    CHECK_THROWS_WITH(g.broadcast(u, odd_one ? 1 : 0), Catch::Contains("from root 1"));
    Tensor v = ones({6});
    CHECK_THROWS_WITH(g.all_reduce(v, odd_one ? ReduceOp::Max : ReduceOp::Sum), Catch::Contains(", max, native"));
    CHECK_THROWS_WITH(g.all_reduce(v, ReduceOp::Sum, odd_one ? AllReduceAlgo::Ring : AllReduceAlgo::Native),
                      Catch::Contains(", sum, ring"));
    // One rank's tensor channels-last, the others' row-major: each element would meet another's.
    Tensor w = zeros({2, 3, 2, 2});
    if (odd_one) w = w.contiguous(MemoryFormat::ChannelsLast);
    CHECK_THROWS_WITH(g.all_reduce(w),
                      Catch::Contains("all_reduce of 24 float32 elements, sum, native;") &&
                          Catch::Contains("sum, native, laid out with dims 0, 2, 3, 1 outermost first"));
  }
  {  // one rank at a barrier while the others all-gather
    Tensor out = zeros({2 * g.size()}), in = ones({2});
    if (odd_one) {
      CHECK_THROWS_WITH(g.barrier(), Catch::Contains("barrier: the ranks' calls differ"));
    } else {
      CHECK_THROWS_WITH(g.all_gather(out, in), Catch::Contains("is barrier") && Catch::Contains("is all_gather"));
    }
    Tensor rs_out = zeros({odd_one ? 1 : 2}), rs_in = ones({odd_one ? g.size() : 2 * g.size()});
    CHECK_THROWS_WITH(g.reduce_scatter(rs_out, rs_in), Catch::Contains("reduce_scatter of 1 float32 elements"));
  }
  // Matching calls go through, after all of the above.
  Tensor t = full({5}, static_cast<double>(r));
  g.all_reduce(t)->wait();
  CHECK(values(t) == std::vector<double>(5, g.size() * (g.size() - 1) / 2.0));
  g.barrier();
}
