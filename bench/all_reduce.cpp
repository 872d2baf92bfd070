// All-reduce benchmark, run under mpirun: kiln's ring (dist/ring.h) against the backend's native
// all-reduce, sums of --dtype (float32; bfloat16 and float16 sum through kiln's own reduction, which
// MPI has no type for) of --min-bytes to --max-bytes (x4 steps), on every rank at once. --op avg
// divides the sums by the ranks (DDP's gradient average), which keeps the tensor of ones at one from
// call to call, where sums grow to infinity within a few dozen calls. Each case
// runs --warmup calls, then times calls until --seconds have passed (at least --min-iters); a call's
// time is the slowest rank's mean (an all-reduce of the ranks' means with Max), the time a training
// step would wait. It reports the algorithm bandwidth (bytes / time) and the bus bandwidth
// nccl-tests defines (algbw x 2 (n - 1) / n: what each rank's link carries, comparable across rank
// counts). Rank 0 prints a table and writes JSON lines (tools/allreduce_model.py --fit reads them).
// Reports speed; never asserts it.
//   usage: mpirun -np N bench_all_reduce [--min-bytes 1024] [--max-bytes 67108864] [--dtype float32]
//          [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/kiln.h"
#include "dist/process_group.h"
#include "examples/common.h"
#include "examples/run_record.h"

using namespace kiln;
using examples::JsonLine;

namespace {

struct Options {
  int64_t min_bytes = 1024, max_bytes = int64_t{64} << 20, warmup = 3, min_iters = 5;
  double seconds = 0.5;
  std::string dtype = "float32", op = "sum";
  std::string json;
};

int run(int argc, char** argv) {
  Options o;
  examples::Flags app("Times kiln's ring all-reduce against the backend's native one, under mpirun.",
                      "bench_all_reduce");
  app.add_option("--min-bytes", o.min_bytes, "smallest message")->transform(examples::whole<int64_t>(4, int64_t{1} << 32));
  app.add_option("--max-bytes", o.max_bytes, "largest message")->transform(examples::whole<int64_t>(4, int64_t{1} << 32));
  app.add_option("--warmup", o.warmup, "untimed calls per case")->transform(examples::whole<int64_t>(0, 1000));
  app.add_option("--min-iters", o.min_iters, "timed calls at least")->transform(examples::whole<int64_t>(1, 1 << 20));
  app.add_option("--seconds", o.seconds, "time per case")->transform(examples::real(0, 600, examples::Ends::open_low));
  app.add_option("--dtype", o.dtype, "the elements summed")->one_of({"float32", "bfloat16", "float16"});
  app.add_option("--op", o.op, "the reduction")->one_of({"sum", "avg"});
  app.add_option("--json", o.json, "rank 0 writes the records (JSON lines) to this file");
  app.parse(argc, argv);

  const DType dtype = o.dtype == "float32" ? DType::Float32 : o.dtype == "bfloat16" ? DType::BFloat16 : DType::Float16;
  const int64_t element = static_cast<int64_t>(element_size(dtype));
  if (o.min_bytes > o.max_bytes) {
    examples::input_error("--min-bytes " + std::to_string(o.min_bytes) + " is above --max-bytes " +
                          std::to_string(o.max_bytes));
  }
  // A message is whole elements: a size between them would time fewer bytes than it records.
  for (const auto& [flag, bytes] : {std::pair{"--min-bytes", o.min_bytes}, std::pair{"--max-bytes", o.max_bytes}}) {
    if (bytes % element != 0) {
      examples::input_error(std::string(flag) + " " + std::to_string(bytes) + " is not a whole number of " + o.dtype +
                            " elements (" + std::to_string(element) + " bytes each)");
    }
  }
  const dist::ReduceOp op = o.op == "sum" ? dist::ReduceOp::Sum : dist::ReduceOp::Avg;
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  const std::string command = examples::command_line(argc, argv);
  JsonLine header;
  header.text("record", "header").text("impl", "kiln").text("date", examples::utc_now());
  header.text("kiln_commit", examples::build_commit()).text("command", command).text("backend", g.backend());
  header.integer("ranks", n).text("dtype", o.dtype).text("op", o.op).text("device", "cpu");
  header.text("device_name", examples::device_name(Device::cpu()));
  std::string text = header.str() + "\n";
  if (g.rank() == 0) {
    std::printf("all-reduce (%s) of %s, %d ranks, backend %s (busbw = algbw x 2(n-1)/n)\n", o.op.c_str(),
                o.dtype.c_str(), n, g.backend().c_str());
    std::printf("%12s %8s %12s %12s %12s\n", "bytes", "algo", "time us", "algbw GB/s", "busbw GB/s");
  }
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    Tensor t = ones({std::max<int64_t>(bytes / element, 1)}, TensorOptions(dtype));
    for (dist::AllReduceAlgo algo : {dist::AllReduceAlgo::Native, dist::AllReduceAlgo::Ring}) {
      for (int64_t i = 0; i < o.warmup; ++i) g.all_reduce(t, op, algo)->wait();
      // Every rank runs the same number of calls: rank 0 decides when time is up, and says so.
      g.barrier();
      int64_t iters = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (;;) {
        g.all_reduce(t, op, algo)->wait();
        ++iters;
        Tensor more = zeros({1}, TensorOptions(DType::Int32));
        if (g.rank() == 0) {
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          more.fill_(iters < o.min_iters || s < o.seconds ? 1 : 0);
        }
        g.broadcast(more, 0)->wait();
        if (more.item<int32_t>() == 0) break;
      }
      // The mean per call includes one 4-byte broadcast per call, far below the smallest message's cost.
      Tensor mean = full_like(zeros({1}, TensorOptions(DType::Float64)),
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                  static_cast<double>(iters));
      g.all_reduce(mean, dist::ReduceOp::Max)->wait();
      const double s = mean.item<double>();
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      if (g.rank() == 0) {
        std::printf("%12lld %8s %12.1f %12.3f %12.3f\n", static_cast<long long>(bytes), dist::all_reduce_algo_name(algo),
                    s * 1e6, algbw, busbw);
        std::fflush(stdout);
      }
      JsonLine c;
      c.text("record", "case").text("impl", "kiln").text("backend", g.backend());
      c.text("algo", dist::all_reduce_algo_name(algo)).text("dtype", o.dtype).text("op", o.op);
      c.integer("bytes", bytes).integer("ranks", n);
      c.integer("iters", iters).real("seconds", s, "%.9g").real("algbw_gbs", algbw, "%.4f");
      c.real("busbw_gbs", busbw, "%.4f");
      text += c.str() + "\n";
    }
  }
  if (g.rank() == 0 && !o.json.empty()) {
    write_file_atomically(o.json, text, "bench_all_reduce");
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_all_reduce", [&] { return run(argc, argv); });
}
