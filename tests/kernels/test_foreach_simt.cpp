// The multi-tensor ("foreach") CUDA kernels (kernels/cuda/foreach.cuh), their real source, run on
// the CPU through the emulator of CUDA's threads (kernels/simt/simt.h), launched as
// kernels/cuda/foreach.cu launches them: launch_chunks cuts a list into tables of (tensor, chunk)
// blocks, one launch per table. launch_chunks is checked alone first, on lists far larger than a
// table (its data pointers are never read). The kernels are compared with the CPU kernels of
// kernels/cpu/foreach.cpp: SGD and AdamW for every (param, state) dtype pair, on the first step
// and later ones (each tensor with its own step count, first and later steps in one launch), with
// a gradient scale, and skipped on found_inf, bit for bit (both compute in float with the same
// per-element code); the norm partials of each chunk and their combination
// against float64; scaling, adding, zeroing, the loss scaler's check-and-unscale (an infinity that
// only a thread other than 0 of a later block sees) and its scale update. Tensor sizes put a tail
// in every loop, lists have more tensors than a table holds, and every tensor lies between guard
// bands. Each case runs under both schedules, which must give the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "kernels/cuda/foreach.cuh"
#include "kernels/foreach.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace fe = kiln::foreach_cuda;

namespace {

constexpr simt::Schedule kSchedules[] = {simt::Schedule::Lowest, simt::Schedule::Highest};

// Sizes that end each loop with a tail: one element, less than a block, one past a block's four
// elements per thread (2048), none, exactly one chunk, three elements into a third chunk.
const std::vector<int64_t> kSizes = {1, 511, 2049, 0, kForeachChunk, 2 * kForeachChunk + 3, 4099};

// `count` tensors of up to 900 elements, every 17th empty: past one launch's table of tensors
// (110 for one list, 48 for three, 36 for four, 30 for five) with 120 and 60.
std::vector<int64_t> many_sizes(int64_t count) {
  std::vector<int64_t> s;
  for (int64_t t = 0; t < count; ++t) s.push_back(t % 17 == 5 ? 0 : (t * 37) % 900 + 1);
  return s;
}
int64_t nonempty(const std::vector<int64_t>& sizes) {
  return std::count_if(sizes.begin(), sizes.end(), [](int64_t s) { return s > 0; });
}

// A list of tensors with elements of type E, each between guard bands, and its entries.
template <typename E> struct List {
  std::vector<Guarded<E>> bufs;
  std::vector<ForeachTensor> entries;

  explicit List(const std::vector<int64_t>& sizes) {
    bufs.reserve(sizes.size());
    for (const int64_t n : sizes) {
      bufs.emplace_back(n);
      entries.push_back({bufs.back().data(), n});
    }
  }
  List(const List& other) : List(other.sizes()) {
    for (size_t t = 0; t < bufs.size(); ++t) std::memcpy(ptr(t), other.ptr(t), bytes(t));
  }
  List& operator=(const List&) = delete;

  std::vector<int64_t> sizes() const {
    std::vector<int64_t> s;
    for (const ForeachTensor& e : entries) s.push_back(e.numel);
    return s;
  }
  int64_t n() const { return static_cast<int64_t>(entries.size()); }
  E* ptr(size_t t) { return bufs[t].data(); }
  const E* ptr(size_t t) const { return bufs[t].data(); }
  size_t bytes(size_t t) const { return static_cast<size_t>(entries[t].numel) * sizeof(E); }
  // Values a * N(0, 1) + b, rounded to E.
  void fill(uint64_t seed, double a, double b) {
    manual_seed(seed);
    for (size_t t = 0; t < bufs.size(); ++t) {
      if (entries[t].numel == 0) continue;
      const std::vector<double> v = randn({entries[t].numel}).to_vector_double();
      for (size_t i = 0; i < v.size(); ++i) ptr(t)[i] = E(static_cast<float>(v[i] * a + b));
    }
  }
  bool same_bits(const List& other) const {
    for (size_t t = 0; t < bufs.size(); ++t) {
      if (std::memcmp(ptr(t), other.ptr(t), bytes(t)) != 0) return false;
    }
    return true;
  }
  bool bands_intact() const {
    for (const Guarded<E>& b : bufs) {
      if (!b.bands_intact()) return false;
    }
    return true;
  }
};

// Runs kernel(table, first_chunk) on the emulator for each launch launch_chunks makes of `lists`,
// with the blocks and threads foreach.cu gives it. Returns the number of launches.
template <int N, typename K>
int emulate(const ForeachTensor* const (&lists)[N], int64_t n, simt::Schedule schedule, K&& kernel) {
  int launches = 0;
  fe::launch_chunks<N>(lists, n, [&](const fe::ChunkTable<N>& table, int blocks, int64_t first_chunk) {
    simt::LaunchConfig cfg;
    cfg.grid = simt::Dim3{static_cast<unsigned>(blocks), 1, 1};
    cfg.block = simt::Dim3{static_cast<unsigned>(fe::kBlock), 1, 1};
    cfg.schedule = schedule;
    simt::launch(cfg, [&] { kernel(table, first_chunk); });
    ++launches;
  });
  return launches;
}

// The launches launch_chunks makes, expanded: for every block, its tensor's index in the list, its
// chunk, and the chunk's index in the whole list.
struct Block {
  int64_t tensor, chunk, first_chunk_plus_block;
};

// Fake, distinct data pointers: list k, tensor t. launch_chunks only copies them.
void* fake_ptr(int k, int64_t t) { return reinterpret_cast<void*>(static_cast<uintptr_t>((t + 1) * 4096 + k * 8)); }

template <int N> void check_tables(const std::vector<int64_t>& sizes) {
  const int64_t n = static_cast<int64_t>(sizes.size());
  std::vector<ForeachTensor> lists_storage[N];
  const ForeachTensor* lists[N];
  for (int k = 0; k < N; ++k) {
    for (int64_t t = 0; t < n; ++t) lists_storage[k].push_back({fake_ptr(k, t), sizes[static_cast<size_t>(t)]});
    lists[k] = lists_storage[k].data();
  }
  std::vector<Block> blocks;
  int launches = 0;
  bool tables_ok = true;
  fe::launch_chunks<N>(lists, n, [&](const fe::ChunkTable<N>& table, int nb, int64_t first_chunk) {
    ++launches;
    CHECK(nb >= 1);
    CHECK(nb <= fe::kMaxBlocks);
    CHECK(first_chunk == static_cast<int64_t>(blocks.size()));
    for (int b = 0; b < nb; ++b) {
      const int slot = table.block_tensor[b];
      if (slot >= fe::ChunkTable<N>::kMaxTensors) {
        tables_ok = false;
        continue;
      }
      // The tensor this slot holds, found by its pointer in list 0; the other lists must agree.
      const int64_t t = static_cast<int64_t>(reinterpret_cast<uintptr_t>(table.data[0][slot]) / 4096) - 1;
      bool ok = t >= 0 && t < n && table.numel[slot] == sizes[static_cast<size_t>(t)];
      for (int k = 0; ok && k < N; ++k) ok = table.data[k][slot] == fake_ptr(k, t);
      if (!ok) {
        tables_ok = false;
        continue;
      }
      blocks.push_back({t, table.block_chunk[b], first_chunk + b});
    }
  });
  CHECK(tables_ok);
  // Every chunk of every tensor once, in (tensor, chunk) order; empty tensors have none.
  std::vector<Block> want;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t chunks = (sizes[static_cast<size_t>(t)] + kForeachChunk - 1) / kForeachChunk;
    for (int64_t c = 0; c < chunks; ++c) want.push_back({t, c, static_cast<int64_t>(want.size())});
  }
  REQUIRE(blocks.size() == want.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    wrong += blocks[i].tensor != want[i].tensor || blocks[i].chunk != want[i].chunk ||
             blocks[i].first_chunk_plus_block != want[i].first_chunk_plus_block;
  }
  CHECK(wrong == 0);
  CHECK(static_cast<int64_t>(want.size()) == foreach_num_chunks(lists[0], n));
  // Few launches: a table is only cut short when its blocks or its tensor slots run out.
  // (A tensor that goes on in the next launch takes a slot in both.)
  const int64_t full = static_cast<int64_t>(want.size()) / fe::kMaxBlocks;
  const int64_t bound = full + (nonempty(sizes) + full) / fe::ChunkTable<N>::kMaxTensors + 1;
  CHECK(launches <= bound);
}

// The (param, state) storage type pairs the CUDA optimizers have kernels for, by dtype pair.
template <typename F> void for_each_pair(F&& f) {
  f.template operator()<float, float>(DType::Float32, DType::Float32);
  f.template operator()<Half, float>(DType::Float16, DType::Float32);
  f.template operator()<Half, Half>(DType::Float16, DType::Float16);
  f.template operator()<BFloat16, float>(DType::BFloat16, DType::Float32);
  f.template operator()<BFloat16, BFloat16>(DType::BFloat16, DType::BFloat16);
}

// The larger of a and b, or NaN if either is.
double max_keeping_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// One optimizer step's device scalars (host memory is device memory on the emulator).
struct Scalars {
  double lr = 0.05;
  float found_inf = 0.f, grad_scale = 1024.f;
  bool scaled = false;
  ForeachScalars get() const {
    ForeachScalars s;
    s.lr = &lr;
    s.found_inf = &found_inf;
    s.grad_scale = scaled ? &grad_scale : nullptr;
    return s;
  }
};

// Each tensor's step count, and the list entries pointing at them.
struct Steps {
  std::vector<float> counts;
  std::vector<ForeachTensor> entries;
  explicit Steps(std::vector<float> c) : counts(std::move(c)) {
    for (float& v : counts) entries.push_back({&v, 1});
  }
  Steps(const Steps&) = delete;
  Steps& operator=(const Steps&) = delete;
};

}  // namespace

TEST_CASE("emulated: foreach launch_chunks cuts lists into tables that fit, every chunk once and in order",
          "[simt][foreach]") {
  // An empty list, many small tensors (past every table's tensor slots), one tensor of many
  // tables' blocks (it continues from launch to launch), and a mix of both with empty tensors.
  std::vector<int64_t> mix;
  for (int64_t t = 0; t < 300; ++t) {
    mix.push_back(t % 50 == 7 ? 700 * kForeachChunk + 5 : t % 13 == 0 ? 0 : (t * 7919) % (3 * kForeachChunk) + 1);
  }
  const std::vector<std::vector<int64_t>> lists = {
      {}, std::vector<int64_t>(1000, 3), {1000 * kForeachChunk}, {0, 0, 5}, many_sizes(120), mix, kSizes};
  for (const auto& sizes : lists) {
    INFO("tensors: " << sizes.size());
    check_tables<1>(sizes);
    check_tables<2>(sizes);
    check_tables<3>(sizes);
    check_tables<4>(sizes);
    check_tables<5>(sizes);
    check_tables<6>(sizes);
  }
}

TEST_CASE("emulated: foreach sgd and adam kernels equal the CPU kernels bit for bit", "[simt][foreach]") {
  const KernelContext ctx;
  for_each_pair([&]<typename P, typename S>(DType pdt, DType sdt) {
    for (const std::vector<int64_t>& sizes : {kSizes, many_sizes(60)}) {
      List<P> p(sizes), g(sizes);
      p.fill(11, 1.0, 0.0);
      g.fill(12, 0.3, 0.01);
      List<S> m(sizes), v(sizes), vmax(sizes);
      m.fill(13, 0.1, 0.0);
      v.fill(14, 0.02, 0.1);
      vmax.fill(15, 0.02, 0.1);  // amsgrad's running maximum: above the new second moment or not
      // Step 0 (SGD's buffer starts as NaN: a first step that used it would give NaN), later steps
      // (every third tensor on its first, the others at 1 to 5) with a gradient scale, and a step
      // skipped on found_inf.
      for (int config = 0; config < 3; ++config) {
        if (sizes.size() != kSizes.size() && config != 1) continue;  // the many tensors: one step is enough
        Scalars sc;
        std::vector<float> counts;
        for (size_t t = 0; t < sizes.size(); ++t) counts.push_back(config == 0 || t % 3 == 1 ? 0.f : float(t % 5 + 1));
        const Steps steps(counts);
        sc.scaled = config >= 1;
        sc.found_inf = config == 2 ? 1.f : 0.f;
        if (sc.scaled) sc.lr = 0.01;
        List<P> gs(g);
        if (sc.scaled) {  // the gradients as a scaled backward leaves them
          for (size_t t = 0; t < gs.bufs.size(); ++t) {
            for (int64_t i = 0; i < gs.entries[t].numel; ++i) {
              gs.ptr(t)[i] = P(static_cast<float>(g.ptr(t)[i]) * 1024.f);
            }
          }
        }
        const ForeachScalars s = sc.get();
        INFO("param " << dtype_name(pdt) << ", state " << dtype_name(sdt) << ", " << sizes.size()
                      << " tensors, config " << config);

        // SGD with momentum, dampening, weight decay and (on later steps) Nesterov; and plain SGD,
        // maximizing.
        for (const bool momentum : {true, false}) {
          SgdHyper h;
          h.momentum = momentum ? 0.9 : 0.0;
          h.dampening = momentum ? 0.1 : 0.0;
          h.weight_decay = 0.01;
          h.nesterov = momentum && config == 1;
          h.maximize = !momentum;
          List<P> p_cpu(p);
          List<S> b_cpu = config != 0 ? List<S>(m) : List<S>(sizes);
          const ForeachTensor* bufs_cpu = momentum ? b_cpu.entries.data() : nullptr;
          sgd_step_cpu(p_cpu.entries.data(), gs.entries.data(), bufs_cpu, steps.entries.data(), p.n(), pdt, sdt, h,
                       s, ctx);
          for (const simt::Schedule sched : kSchedules) {
            List<P> pe(p);
            List<S> be = config != 0 ? List<S>(m) : List<S>(sizes);
            // Without a buffer list foreach.cu repeats the params in the table's third column.
            const ForeachTensor* lists[4] = {pe.entries.data(), gs.entries.data(),
                                             momentum ? be.entries.data() : pe.entries.data(), steps.entries.data()};
            emulate<4>(lists, p.n(), sched, [&](const fe::ChunkTable<4>& table, int64_t) {
              fe::sgd_kernel<P, S>(table, h, s, momentum);
            });
            CHECK(pe.same_bits(p_cpu));
            if (momentum) CHECK(be.same_bits(b_cpu));
            CHECK(pe.bands_intact());
            CHECK(be.bands_intact());
            if (config == 2) CHECK(pe.same_bits(p));
          }
        }

        // AdamW; and Adam with L2 weight decay, amsgrad and maximize.
        for (const bool adamw : {true, false}) {
          AdamHyper h;
          h.weight_decay = 0.1;
          h.decoupled_weight_decay = adamw;
          h.amsgrad = h.maximize = !adamw;
          List<P> p_cpu(p);
          List<S> m_cpu(m), v_cpu(v), x_cpu(vmax);
          adam_step_cpu(p_cpu.entries.data(), gs.entries.data(), m_cpu.entries.data(), v_cpu.entries.data(),
                        adamw ? nullptr : x_cpu.entries.data(), steps.entries.data(), p.n(), pdt, sdt, h, s, ctx);
          for (const simt::Schedule sched : kSchedules) {
            List<P> pe(p);
            List<S> me(m), ve(v), xe(vmax);
            // Without amsgrad foreach.cu repeats the second moments in the table's fifth column.
            const ForeachTensor* lists[6] = {pe.entries.data(),
                                             gs.entries.data(),
                                             me.entries.data(),
                                             ve.entries.data(),
                                             adamw ? ve.entries.data() : xe.entries.data(),
                                             steps.entries.data()};
            const int launches = emulate<6>(lists, p.n(), sched, [&](const fe::ChunkTable<6>& table, int64_t) {
              fe::adam_kernel<P, S>(table, h, s);
            });
            CHECK(launches == (nonempty(sizes) + 29) / 30);
            CHECK(pe.same_bits(p_cpu));
            CHECK(me.same_bits(m_cpu));
            CHECK(ve.same_bits(v_cpu));
            CHECK(xe.same_bits(x_cpu));
            CHECK((pe.bands_intact() && me.bands_intact() && ve.bands_intact() && xe.bands_intact()));
            if (config == 2) CHECK((pe.same_bits(p) && me.same_bits(m) && ve.same_bits(v) && xe.same_bits(vmax)));
            if (adamw) CHECK(xe.same_bits(vmax));  // never touched without amsgrad
          }
          // Amsgrad's maximum moved where the new second moment passed it, and only there.
          if (!adamw && config != 2) {
            bool raised = false, kept = false;
            for (size_t t = 0; t < x_cpu.bufs.size(); ++t) {
              for (int64_t i = 0; i < x_cpu.entries[t].numel; ++i) {
                const bool same = static_cast<float>(x_cpu.ptr(t)[i]) == static_cast<float>(vmax.ptr(t)[i]);
                (same ? kept : raised) = true;
              }
            }
            CHECK((raised && kept));
          }
        }
      }
    }
  });
}

TEST_CASE("emulated: foreach norm kernels give each chunk's partial and their combination", "[simt][foreach]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    with_float_storage(dt, [&]<typename T>() {
      // The sizes with tails, without and with a NaN; and (float32) more tensors than one launch
      // takes, whose second launch writes its partials from its first chunk's index in the list.
      for (int list = 0; list < (dt == DType::Float32 ? 3 : 2); ++list) {
        const bool with_nan = list == 1;
        List<T> x(list < 2 ? kSizes : many_sizes(120));
        x.fill(21, 3.0, 0.5);
        // Element 70000 of the tensor of three chunks: its chunk 1 (chunk 5 of the list), thread 368.
        if (with_nan) x.ptr(5)[70000] = T(std::numeric_limits<float>::quiet_NaN());
        const int64_t chunks = foreach_num_chunks(x.entries.data(), x.n());
        REQUIRE(chunks == (list < 2 ? 8 : nonempty(x.sizes())));
        for (const double p : {2.0, 1.0, 3.0, inf}) {
          INFO(dtype_name(dt) << ", list " << list << ", p = " << p);
          const fe::NormMode mode = fe::norm_mode(p);
          // Each chunk's sum of |x|^p (or max |x|) in float64.
          std::vector<double> want;
          for (size_t t = 0; t < x.bufs.size(); ++t) {
            for (int64_t b = 0; b < x.entries[t].numel; b += kForeachChunk) {
              double acc = 0.0;
              for (int64_t i = b; i < std::min(x.entries[t].numel, b + kForeachChunk); ++i) {
                const double a = std::fabs(static_cast<double>(static_cast<float>(x.ptr(t)[i])));
                acc = std::isinf(p) ? max_keeping_nan(acc, a) : acc + std::pow(a, p);
              }
              want.push_back(acc);
            }
          }
          std::vector<std::vector<double>> got_partials;
          std::vector<float> got_out;
          for (const simt::Schedule sched : kSchedules) {
            Guarded<double> partials(chunks);
            Guarded<float> out(1);
            const ForeachTensor* lists[1] = {x.entries.data()};
            const int launches = emulate<1>(lists, x.n(), sched, [&](const fe::ChunkTable<1>& table, int64_t first) {
              fe::norm_partials_kernel<T>(table, partials.data(), first, mode, static_cast<float>(p));
            });
            CHECK(launches == (list < 2 ? 1 : 2));
            simt::LaunchConfig cfg;
            cfg.block = simt::Dim3{static_cast<unsigned>(fe::kBlock), 1, 1};
            cfg.schedule = sched;
            simt::launch(cfg, [&] { fe::norm_finish_kernel(out.data(), false, partials.data(), chunks, mode, p); });
            CHECK((partials.bands_intact() && out.bands_intact()));
            got_partials.emplace_back(partials.data(), partials.data() + chunks);
            got_out.push_back(*out.data());
          }
          CHECK(std::memcmp(got_partials[0].data(), got_partials[1].data(), static_cast<size_t>(chunks) * 8) == 0);
          CHECK(std::memcmp(&got_out[0], &got_out[1], sizeof(float)) == 0);
          double combined = 0.0;
          for (int64_t k = 0; k < chunks; ++k) {
            const double g = got_partials[0][static_cast<size_t>(k)], w = want[static_cast<size_t>(k)];
            INFO("chunk " << k << ": " << g << " against " << w);
            if (std::isnan(w)) {
              CHECK(std::isnan(g));
            } else if (std::isinf(p)) {
              CHECK(g == w);  // a max is exact
            } else {
              CHECK(std::fabs(g - w) <= 1e-5 * w);
            }
            combined = std::isinf(p) ? max_keeping_nan(combined, g) : combined + g;
          }
          // The combination of the partials the kernels gave, in float64, then rounded once.
          const double norm = std::isinf(p) ? combined : std::pow(combined, 1.0 / p);
          if (with_nan) {
            CHECK(std::isnan(got_out[0]));
          } else {
            CHECK(std::fabs(got_out[0] - norm) <= 1e-6 * norm);
          }
        }
      }
    });
  }
}

// And its float64 output: the norm of float64 tensors, past float32's range.
TEST_CASE("emulated: foreach norm finish kernel combines more partials than it has threads", "[simt][foreach]") {
  const int64_t count = 3 * fe::kBlock + 37;
  std::vector<double> partials(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    partials[static_cast<size_t>(k)] = static_cast<double>((k * 7919) % 1000) * 0.01 + 1.0;
  }
  simt::LaunchConfig cfg;
  cfg.block = simt::Dim3{static_cast<unsigned>(fe::kBlock), 1, 1};
  const auto finish = [&](double p) {
    float out = -1.f;
    simt::launch(cfg, [&] { fe::norm_finish_kernel(&out, false, partials.data(), count, fe::norm_mode(p), p); });
    return out;
  };
  const auto finish_f64 = [&](double p) {
    double out = -1.0;
    simt::launch(cfg, [&] { fe::norm_finish_kernel(&out, true, partials.data(), count, fe::norm_mode(p), p); });
    return out;
  };
  double sum = 0.0, max = 0.0;
  for (const double v : partials) {
    sum += v;
    max = std::max(max, v);
  }
  CHECK(std::fabs(finish_f64(2.0) - std::sqrt(sum)) <= 1e-14 * std::sqrt(sum));
  CHECK(finish_f64(std::numeric_limits<double>::infinity()) == max);
  const double first = partials[0];
  partials[0] = 1e300;  // a float64 sum of squares: its root 1e150 is a float64 norm, inf as a float
  CHECK(finish_f64(2.0) == Approx(1e150).epsilon(1e-12));
  CHECK(std::isinf(finish(2.0)));
  partials[0] = first;
  CHECK(std::fabs(finish(2.0) - std::sqrt(sum)) <= 1e-6 * std::sqrt(sum));
  CHECK(std::fabs(finish(1.0) - sum) <= 1e-6 * sum);
  CHECK(std::fabs(finish(3.0) - std::cbrt(sum)) <= 1e-6 * std::cbrt(sum));
  CHECK(finish(std::numeric_limits<double>::infinity()) == static_cast<float>(max));
  partials[static_cast<size_t>(count - 1)] = 1e30;  // the last partial, in the last thread's fourth pass
  CHECK(finish(std::numeric_limits<double>::infinity()) == 1e30f);
  partials[static_cast<size_t>(count - 1)] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(finish(2.0)));
  CHECK(std::isnan(finish(std::numeric_limits<double>::infinity())));
}

TEST_CASE("emulated: foreach scale, add and zero kernels equal the CPU kernels", "[simt][foreach]") {
  const KernelContext ctx;
  const std::vector<int64_t> sizes = many_sizes(120);  // more than one launch's 110 tensors
  for (const DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    with_float_storage(dt, [&]<typename T>() {
      INFO(dtype_name(dt));
      List<T> x(sizes);
      x.fill(31, 2.0, 0.0);
      const float scalar = 0.37f, zero = 0.f, one = 1.f;
      List<T> want(x);
      foreach_mul_scalar_cpu(want.entries.data(), want.n(), dt, &scalar, DType::Float32, ctx);
      // The same factor as float64 (0.37 rounds to the float32 factor's value once).
      const double scalar64 = 0.37;
      List<T> want64(x);
      foreach_mul_scalar_cpu(want64.entries.data(), want64.n(), dt, &scalar64, DType::Float64, ctx);
      CHECK(want64.same_bits(want));
      for (const bool f64 : {false, true}) {
        for (const simt::Schedule sched : kSchedules) {
          List<T> e(x);
          const ForeachTensor* lists[1] = {e.entries.data()};
          const void* s = f64 ? static_cast<const void*>(&scalar64) : static_cast<const void*>(&scalar);
          const int launches = emulate<1>(lists, e.n(), sched, [&](const fe::ChunkTable<1>& table, int64_t) {
            fe::mul_scalar_kernel<T>(table, s, f64);
          });
          CHECK(launches == 2);
          CHECK(e.same_bits(want));
          CHECK(e.bands_intact());
        }
      }
      // Added to, unless a found_inf flag is given and set.
      for (const float* found : {static_cast<const float*>(nullptr), &zero, &one}) {
        List<T> expect(x);
        foreach_add_scalar_cpu(expect.entries.data(), expect.n(), dt, 0.25, found, ctx);
        if (found == &one) CHECK(expect.same_bits(x));
        for (const simt::Schedule sched : kSchedules) {
          List<T> e(x);
          const ForeachTensor* lists[1] = {e.entries.data()};
          emulate<1>(lists, e.n(), sched, [&](const fe::ChunkTable<1>& table, int64_t) {
            fe::add_scalar_kernel<T>(table, 0.25f, found);
          });
          CHECK(e.same_bits(expect));
          CHECK(e.bands_intact());
        }
      }
    });
  }
  const auto zeroed = [&]<typename U>() {
    List<U> x(kSizes);
    for (size_t t = 0; t < x.bufs.size(); ++t) std::memset(static_cast<void*>(x.ptr(t)), 0xA5, x.bytes(t));
    const ForeachTensor* lists[1] = {x.entries.data()};
    emulate<1>(lists, x.n(), simt::Schedule::Lowest, [&](const fe::ChunkTable<1>& table, int64_t) {
      fe::zero_kernel<U>(table);
    });
    int64_t nonzero = 0;
    for (size_t t = 0; t < x.bufs.size(); ++t) {
      nonzero += std::count_if(x.ptr(t), x.ptr(t) + x.entries[t].numel, [](U u) { return u != U(0); });
    }
    CHECK(nonzero == 0);
    CHECK(x.bands_intact());
  };
  zeroed.template operator()<uint8_t>();
  zeroed.template operator()<uint16_t>();
  zeroed.template operator()<uint32_t>();
  zeroed.template operator()<uint64_t>();
}

TEST_CASE("emulated: foreach check-and-unscale and scale update kernels match the CPU", "[simt][foreach]") {
  const KernelContext ctx;
  const auto run = [&]<typename T>(DType dt) {
    // All finite; an infinity at element 70000 of the three-chunk tensor (block 5, thread 368); a
    // NaN as the list's last element. With an inverse scale (every element multiplied, as the CPU
    // kernel does, bad or not) and without (a check that writes nothing).
    for (int bad = 0; bad < 3; ++bad) {
      List<T> x(kSizes);
      x.fill(41, 100.0, 0.0);
      if (bad == 1) x.ptr(5)[70000] = T(std::numeric_limits<float>::infinity());
      if (bad == 2) x.ptr(6)[4098] = T(std::numeric_limits<float>::quiet_NaN());
      for (const bool unscale : {true, false}) {
        INFO(dtype_name(dt) << ", case " << bad << (unscale ? ", unscaled" : ", checked only"));
        const float inv = 1.f / 1024.f;
        const float* inv_scale = unscale ? &inv : nullptr;
        List<T> want(x);
        float want_found = 0.f;
        foreach_non_finite_check_and_unscale_cpu(want.entries.data(), want.n(), dt, &want_found, inv_scale, ctx);
        CHECK(want_found == (bad != 0 ? 1.f : 0.f));
        if (!unscale) CHECK(want.same_bits(x));
        for (const simt::Schedule sched : kSchedules) {
          List<T> e(x);
          float found = 0.f;
          const ForeachTensor* lists[1] = {e.entries.data()};
          emulate<1>(lists, e.n(), sched, [&](const fe::ChunkTable<1>& table, int64_t) {
            fe::check_unscale_kernel<T>(table, &found, inv_scale);
          });
          CHECK(found == want_found);
          CHECK(e.same_bits(want));
          CHECK(e.bands_intact());
        }
      }
    }
  };
  run.template operator()<double>(DType::Float64);
  run.template operator()<float>(DType::Float32);
  run.template operator()<Half>(DType::Float16);
  run.template operator()<BFloat16>(DType::BFloat16);

  // The scale update: growth after 3 clean steps, backoff on an overflow, no growth past float's range.
  float scale = 65536.f, want_scale = scale, big = 3e38f, want_big = big;
  int32_t tracker = 0, want_tracker = 0, big_tracker = 2, want_big_tracker = 2;
  const float found_seq[] = {0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0};
  simt::LaunchConfig one_thread;
  for (const float found : found_seq) {
    simt::launch(one_thread, [&] { fe::amp_update_scale_kernel(&scale, &tracker, &found, 2.0, 0.5, 3); });
    amp_update_scale_cpu(&want_scale, &want_tracker, &found, 2.0, 0.5, 3, ctx);
    CHECK(scale == want_scale);
    CHECK(tracker == want_tracker);
  }
  CHECK(scale == 65536.f * 2 * 0.5 * 2 * 0.25);
  const float clean = 0.f;
  simt::launch(one_thread, [&] { fe::amp_update_scale_kernel(&big, &big_tracker, &clean, 2.0, 0.5, 3); });
  amp_update_scale_cpu(&want_big, &want_big_tracker, &clean, 2.0, 0.5, 3, ctx);
  CHECK(big == want_big);
  CHECK(big == 3e38f);
  CHECK(big_tracker == want_big_tracker);
}
