// CPU reference for reductions. Each reduction is a policy with a partial over
// a range of the reduced space, an in-order merge and a store; short reductions run one range per
// output, long ones with few outputs are cut into fixed 32768-element chunks whose partials merge in
// chunk order, so which path runs and where chunks start never depend on the thread count. Sums
// and means whose outputs are neighbours in the input add whole rows at a time (column_sums), in
// the same order per output.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"
#include "kernels/reduce.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

constexpr int64_t kChunk = 32768;            // elements per partial on the chunked path
constexpr int64_t kMaxSequentialCount = 65536;  // longer reductions with few outputs are chunked
constexpr int64_t kMinParallelOutputs = 16;     // this many outputs keep the pool busy on their own

template <typename T> constexpr bool is_float_type_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T, typename C> inline C read_as(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bool>) {
    return p[i] ? C(1) : C(0);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<C>(static_cast<float>(p[i]));
  } else {
    return static_cast<C>(p[i]);
  }
}

template <typename C> inline bool is_nan_v(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Integer sums and products wrap like PyTorch's int64 instead of being undefined behaviour.
template <typename C> inline C add_c(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}
template <typename C> inline C mul_c(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

// The reduced space of one output: calls f(value, r) for linear reduced indices r in [begin, end).
template <typename T> struct Source {
  const T* in;
  int ndim;
  const int64_t* sizes;
  const int64_t* strides;

  template <typename C, typename F> void for_each(int64_t base, int64_t begin, int64_t end, F&& f) const {
    if (begin >= end) return;
    const int64_t* st[1] = {strides};
    const T* p = in + base;
    int64_t r = begin;
    cpu::nd_loop<1>(ndim, sizes, st, begin, end, [&](const int64_t* off) {
      f(read_as<T, C>(p, off[0]), r);
      ++r;
    });
  }
};

template <typename C> struct SumOp {
  using Partial = C;
  static constexpr bool kAdds = true;  // a partial is the sum of its values (column_sums may run it)
  template <typename T> static Partial partial(const Source<T>& s, int64_t base, int64_t b, int64_t e) {
    C acc = 0;
    s.template for_each<C>(base, b, e, [&](C v, int64_t) { acc = add_c(acc, v); });
    return acc;
  }
  static void merge(Partial& a, const Partial& b) { a = add_c(a, b); }
  static void store(const ReduceArgs& args, int64_t o, int64_t, const Partial& p, int64_t) {
    if (args.out.data) store_as<C>(args.out.data, args.out.dtype, o, p);
  }
};

template <typename C> struct ProdOp {
  using Partial = C;
  template <typename T> static Partial partial(const Source<T>& s, int64_t base, int64_t b, int64_t e) {
    C acc = 1;
    s.template for_each<C>(base, b, e, [&](C v, int64_t) { acc = mul_c(acc, v); });
    return acc;
  }
  static void merge(Partial& a, const Partial& b) { a = mul_c(a, b); }
  static void store(const ReduceArgs& args, int64_t o, int64_t, const Partial& p, int64_t) {
    if (args.out.data) store_as<C>(args.out.data, args.out.dtype, o, p);
  }
};

struct MeanOp {
  using Partial = double;
  static constexpr bool kAdds = true;
  template <typename T> static Partial partial(const Source<T>& s, int64_t base, int64_t b, int64_t e) {
    double acc = 0;
    s.template for_each<double>(base, b, e, [&](double v, int64_t) { acc += v; });
    return acc;
  }
  static void merge(Partial& a, const Partial& b) { a += b; }
  static void store(const ReduceArgs& args, int64_t o, int64_t, const Partial& p, int64_t count) {
    if (args.out.data) {
      store_as<double>(args.out.data, args.out.dtype, o, count == 0 ? kNaN : p / static_cast<double>(count));
    }
  }
};

// Max/Min (kValue) and ArgMax/ArgMin. The first NaN wins and stays; otherwise only a strictly
// better value replaces the current one, so ties keep the earliest index, and merging keeps the
// left partial (lower indices) on ties.
template <typename C, bool kMax, bool kValue> struct ExtremeOp {
  struct Partial {
    C v{};
    int64_t idx = -1;  // -1: empty range
  };
  static bool better(C cand, C cur) {
    if (is_nan_v(cur)) return false;
    if (is_nan_v(cand)) return true;
    return kMax ? cand > cur : cand < cur;
  }
  template <typename T> static Partial partial(const Source<T>& s, int64_t base, int64_t b, int64_t e) {
    Partial p;
    s.template for_each<C>(base, b, e, [&](C v, int64_t r) {
      if (p.idx < 0 || better(v, p.v)) {
        p.v = v;
        p.idx = r;
      }
    });
    return p;
  }
  static void merge(Partial& a, const Partial& b) {
    if (b.idx < 0) return;
    if (a.idx < 0 || better(b.v, a.v)) a = b;
  }
  static void store(const ReduceArgs& args, int64_t o, int64_t io, const Partial& p, int64_t) {
    if (args.indices.data) store_as<int64_t>(args.indices.data, args.indices.dtype, io, p.idx);
    if (!args.out.data) return;
    // ArgMax/ArgMin normally only fill `indices`; when core hands the result as `out` instead, the
    // index goes there.
    if constexpr (kValue) {
      store_as<C>(args.out.data, args.out.dtype, o, p.v);
    } else {
      store_as<int64_t>(args.out.data, args.out.dtype, o, p.idx);
    }
  }
};

// Partials are (count, mean, M2) computed two-pass over their own range (more accurate than
// Welford's update) and merged with Chan et al.'s pairwise formula, in chunk order.
struct VarOp {
  struct Partial {
    int64_t n = 0;
    double mean = 0;
    double m2 = 0;
  };
  template <typename T> static Partial partial(const Source<T>& s, int64_t base, int64_t b, int64_t e) {
    Partial p;
    if (b >= e) return p;
    double sum = 0;
    s.template for_each<double>(base, b, e, [&](double v, int64_t) { sum += v; });
    p.n = e - b;
    p.mean = sum / static_cast<double>(p.n);
    double m2 = 0;
    s.template for_each<double>(base, b, e, [&](double v, int64_t) {
      double d = v - p.mean;
      m2 += d * d;
    });
    p.m2 = m2;
    return p;
  }
  static void merge(Partial& a, const Partial& b) {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const double na = static_cast<double>(a.n), nb = static_cast<double>(b.n), n = na + nb;
    const double delta = b.mean - a.mean;
    a.mean += delta * (nb / n);
    a.m2 += b.m2 + delta * delta * (na * nb / n);
    a.n += b.n;
  }
  static void store(const ReduceArgs& args, int64_t o, int64_t, const Partial& p, int64_t) {
    if (!args.out.data) return;
    const double dof = std::max(0.0, static_cast<double>(p.n) - args.correction);  // 0: inf, or NaN for 0 / 0
    store_as<double>(args.out.data, args.out.dtype, o, p.m2 / dof);
  }
};

// Partials are bytes, not bool: a std::vector<bool> of partials would pack bits and race.
template <typename C, bool kAny> struct LogicalOp {
  using Partial = unsigned char;
  template <typename T> static Partial partial(const Source<T>& s, int64_t base, int64_t b, int64_t e) {
    bool acc = !kAny;
    s.template for_each<C>(base, b, e, [&](C v, int64_t) {
      if constexpr (kAny) {
        acc = acc || v != C(0);
      } else {
        acc = acc && v != C(0);
      }
    });
    return acc ? 1 : 0;
  }
  static void merge(Partial& a, const Partial& b) { a = kAny ? (a | b) : (a & b); }
  static void store(const ReduceArgs& args, int64_t o, int64_t, const Partial& p, int64_t) {
    if (args.out.data) store_as<int64_t>(args.out.data, args.out.dtype, o, p);
  }
};

// acc[j] += row[j] for one input row, in clones for the CPU's vector width (loops.h).
template <typename Op, typename T, typename P> KILN_CPU_CLONES void add_row(P* acc, const T* row, int64_t w) {
  for (int64_t j = 0; j < w; ++j) Op::merge(acc[j], read_as<T, P>(row, j));
}

template <typename Op> constexpr bool adds() {
  if constexpr (requires { Op::kAdds; }) {
    return Op::kAdds;
  } else {
    return false;
  }
}

// Sums whose outputs are neighbours in the input, as a bias gradient's are ([N, C] summed over N):
// whole input rows are added into a row of accumulators, a loop the compiler vectorizes, instead of
// one strided walk per output. Each output still adds its values in reduced-index order starting
// from 0, as the per-output path does, so the bits are the same. Returns false when the layout does
// not fit (the innermost kept dim longer than 1 is not contiguous in the input, or is short).
template <typename Op, typename T> bool column_sums(const ReduceArgs& args, int64_t count) {
  using Partial = typename Op::Partial;
  constexpr int64_t kCols = 256;  // accumulators per task, on the stack
  const int nd = args.out.ndim;
  int d = nd - 1;
  while (d >= 0 && args.out.sizes[d] == 1) --d;
  if (d < 0 || args.in_kept_strides[d] != 1 || args.out.sizes[d] < 8) return false;
  const int64_t width = args.out.sizes[d];
  int64_t outer_sizes[kMaxDims];
  for (int i = 0; i < nd; ++i) outer_sizes[i] = i == d ? 1 : args.out.sizes[i];
  const int64_t outer = args.out.numel() / width, blocks = (width + kCols - 1) / kCols;
  const int64_t* ostrides[2] = {args.out.strides, args.in_kept_strides};
  const T* in = static_cast<const T*>(args.in);
  cpu::parallel_for(outer * blocks, cpu::grain_for(count * kCols), [&](int64_t, int64_t t0, int64_t t1) {
    Partial acc[kCols];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j0 = (t % blocks) * kCols, w = std::min(kCols, width - j0);
      int64_t out_off = 0, in_off = 0;
      cpu::nd_loop<2>(nd, outer_sizes, ostrides, t / blocks, t / blocks + 1, [&](const int64_t* off) {
        out_off = off[0];
        in_off = off[1];
      });
      std::fill(acc, acc + w, Partial(0));
      const int64_t* rstrides[1] = {args.red_strides};
      cpu::nd_rows<1>(args.red_ndim, args.red_sizes, rstrides, 0, count,
                      [&](const int64_t* off, int64_t n, const int64_t* st) {
                        for (int64_t k = 0; k < n; ++k) add_row<Op>(acc, in + in_off + off[0] + k * st[0] + j0, w);
                      });
      for (int64_t j = 0; j < w; ++j) Op::store(args, out_off + (j0 + j) * args.out.strides[d], 0, acc[j], count);
    }
  });
  return true;
}

template <typename Op, typename T> void run_reduce(const ReduceArgs& args) {
  using Partial = typename Op::Partial;
  int64_t count = 1;
  for (int d = 0; d < args.red_ndim; ++d) count *= args.red_sizes[d];
  const int64_t nout = args.out.numel();
  if (nout == 0) return;
  const Source<T> src{static_cast<const T*>(args.in), args.red_ndim, args.red_sizes, args.red_strides};
  const int64_t* ostrides[3] = {args.out.strides, args.indices.strides, args.in_kept_strides};

  if (nout >= kMinParallelOutputs || count <= kMaxSequentialCount) {
    if constexpr (adds<Op>()) {
      if (count > 0 && column_sums<Op, T>(args, count)) return;
    }
    cpu::parallel_for(nout, cpu::grain_for(count), [&](int64_t, int64_t b0, int64_t e0) {
      cpu::nd_loop<3>(args.out.ndim, args.out.sizes, ostrides, b0, e0, [&](const int64_t* off) {
        Partial p = Op::partial(src, off[2], 0, count);
        Op::store(args, off[0], off[1], p, count);
      });
    });
    return;
  }

  const int64_t nchunks = cpu::num_chunks(count, kChunk);
  std::vector<Partial> parts(static_cast<size_t>(nchunks));
  cpu::nd_loop<3>(args.out.ndim, args.out.sizes, ostrides, 0, nout, [&](const int64_t* off) {
    const int64_t base = off[2];
    cpu::parallel_for(nchunks, 1, [&](int64_t, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        parts[static_cast<size_t>(c)] = Op::partial(src, base, c * kChunk, std::min(count, (c + 1) * kChunk));
      }
    });
    Partial acc = parts[0];
    for (int64_t c = 1; c < nchunks; ++c) Op::merge(acc, parts[static_cast<size_t>(c)]);
    Op::store(args, off[0], off[1], acc, count);
  });
}

}  // namespace

void reduce_cpu(ReduceOp op, const ReduceArgs& args, const KernelContext&) {
  visit_dtype(args.in_dtype, [&]<typename T>() {
    using C = std::conditional_t<is_float_type_v<T>, double, int64_t>;
    switch (op) {
      case ReduceOp::Sum: run_reduce<SumOp<C>, T>(args); return;
      case ReduceOp::Mean: run_reduce<MeanOp, T>(args); return;
      case ReduceOp::Max: run_reduce<ExtremeOp<C, true, true>, T>(args); return;
      case ReduceOp::Min: run_reduce<ExtremeOp<C, false, true>, T>(args); return;
      case ReduceOp::ArgMax: run_reduce<ExtremeOp<C, true, false>, T>(args); return;
      case ReduceOp::ArgMin: run_reduce<ExtremeOp<C, false, false>, T>(args); return;
      case ReduceOp::Var: run_reduce<VarOp, T>(args); return;
      case ReduceOp::Prod: run_reduce<ProdOp<C>, T>(args); return;
      case ReduceOp::Any: run_reduce<LogicalOp<C, true>, T>(args); return;
      case ReduceOp::All: run_reduce<LogicalOp<C, false>, T>(args); return;
    }
  });
}

}  // namespace kiln
