// CPU reference for reductions, topk and multinomial. Each reduction is a policy with a partial over
// a range of the reduced space, an in-order merge and a store; short reductions run one range per
// output, long ones with few outputs are cut into fixed 32768-element chunks whose partials merge in
// chunk order, so which path runs and where chunks start never depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdio>
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
    const double dof = static_cast<double>(p.n) - args.correction;
    store_as<double>(args.out.data, args.out.dtype, o, dof <= 0 ? kNaN : p.m2 / dof);
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

template <typename Op, typename T> void run_reduce(const ReduceArgs& args) {
  using Partial = typename Op::Partial;
  int64_t count = 1;
  for (int d = 0; d < args.red_ndim; ++d) count *= args.red_sizes[d];
  const int64_t nout = args.out.numel();
  if (nout == 0) return;
  const Source<T> src{static_cast<const T*>(args.in), args.red_ndim, args.red_sizes, args.red_strides};
  const int64_t* ostrides[3] = {args.out.strides, args.indices.strides, args.in_kept_strides};

  if (nout >= kMinParallelOutputs || count <= kMaxSequentialCount) {
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

std::string format_value(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// (value, index) order for topk: NaN above every number, ties by lower index.
bool greater_nan_high(double a, double b) {
  if (std::isnan(b)) return false;
  if (std::isnan(a)) return true;
  return a > b;
}

}  // namespace

void reduce_cpu(ReduceOp op, const ReduceArgs& args) {
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

void topk_cpu(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
              int64_t n, int64_t k, bool largest) {
  if (k > n) {
    throw Error("topk: k = " + std::to_string(k) + " is larger than the row size " + std::to_string(n));
  }
  if (k <= 0 || rows <= 0) return;
  // Values are copied from the input in its own compute type so int64 values survive exactly;
  // only the comparison goes through double.
  const bool integral = is_integral(in_dtype, true);
  cpu::parallel_for(rows, cpu::grain_for(n), [&](int64_t, int64_t b0, int64_t e0) {
    std::vector<std::pair<double, int64_t>> row(static_cast<size_t>(n));
    for (int64_t r = b0; r < e0; ++r) {
      for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] = {load_as<double>(in, in_dtype, r * n + j), j};
      auto before = [largest](const std::pair<double, int64_t>& x, const std::pair<double, int64_t>& y) {
        const bool xy = largest ? greater_nan_high(x.first, y.first) : greater_nan_high(y.first, x.first);
        if (xy) return true;
        const bool yx = largest ? greater_nan_high(y.first, x.first) : greater_nan_high(x.first, y.first);
        return !yx && x.second < y.second;
      };
      std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = r * n + row[static_cast<size_t>(j)].second;
        const int64_t dst = r * k + j;
        if (indices) indices[dst] = row[static_cast<size_t>(j)].second;
        if (!values) continue;
        if (integral) {
          store_as<int64_t>(values, values_dtype, dst, load_as<int64_t>(in, in_dtype, src));
        } else {
          store_as<double>(values, values_dtype, dst, load_as<double>(in, in_dtype, src));
        }
      }
    }
  });
}

void multinomial_cpu(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                     PhiloxState philox) {
  const bool two_d = probs.ndim >= 2;
  const int64_t rows = two_d ? probs.sizes[0] : 1;
  const int64_t n = two_d ? probs.sizes[1] : probs.sizes[0];
  const int64_t row_stride = two_d ? probs.strides[0] : 0;
  const int64_t col_stride = two_d ? probs.strides[1] : probs.strides[0];
  if (rows <= 0) return;

  const int64_t grain = cpu::grain_for(n + num_samples);
  // One error slot per chunk: each chunk stops at its first bad row, so the lowest failing chunk
  // holds the lowest bad row and the message never depends on which thread failed first.
  std::vector<std::string> errors(static_cast<size_t>(cpu::num_chunks(rows, grain)));

  cpu::parallel_for(rows, grain, [&](int64_t chunk, int64_t b0, int64_t e0) {
    std::vector<double> w(static_cast<size_t>(n));
    std::vector<std::pair<double, int64_t>> keys;
    for (int64_t r = b0; r < e0; ++r) {
      std::string& err = errors[static_cast<size_t>(chunk)];
      auto row_name = [r] { return "multinomial: row " + std::to_string(r); };
      double total = 0;
      int64_t nonzero = 0, last_nonzero = -1;
      for (int64_t j = 0; j < n; ++j) {
        const double p = load_as<double>(probs.data, probs.dtype, r * row_stride + j * col_stride);
        if (std::isnan(p) || std::isinf(p)) {
          err = row_name() + " has an invalid weight " + format_value(p) + " at index " + std::to_string(j);
          return;
        }
        if (p < 0) {
          err = row_name() + " has a negative weight " + format_value(p) + " at index " + std::to_string(j);
          return;
        }
        if (p > 0) {
          ++nonzero;
          last_nonzero = j;
        }
        total += p;
        w[static_cast<size_t>(j)] = replacement ? total : p;  // cumulative sum when sampling with replacement
      }
      if (total == 0) {
        err = row_name() + " has weights that sum to zero";
        return;
      }
      if (std::isinf(total)) {
        err = row_name() + " has weights whose sum overflows to inf";
        return;
      }
      if (!replacement && nonzero < num_samples) {
        err = row_name() + " has only " + std::to_string(nonzero) + " non-zero weights, fewer than num_samples = " +
              std::to_string(num_samples) + " (sampling without replacement)";
        return;
      }

      int64_t* dst = out + r * num_samples;
      if (replacement) {
        for (int64_t s = 0; s < num_samples; ++s) {
          const uint64_t e = static_cast<uint64_t>(r * num_samples + s);
          const Philox4 blk = philox_block(philox.seed, philox.offset, e >> 1);
          const double u = philox_uniform_double(blk.v[(e & 1) * 2], blk.v[(e & 1) * 2 + 1]);
          // First category whose cumulative sum exceeds the target; zero-weight categories repeat
          // the previous sum, so they can never be the first to exceed it.
          const auto it = std::upper_bound(w.begin(), w.end(), u * total);
          int64_t j = static_cast<int64_t>(it - w.begin());
          if (j >= n) j = last_nonzero;  // u * total rounded up to total
          dst[s] = j;
        }
      } else {
        // Exponential race: category j finishes at E_j / p_j; zero weights never enter the race.
        keys.clear();
        for (int64_t j = 0; j < n; ++j) {
          const double p = w[static_cast<size_t>(j)];
          if (p <= 0) continue;
          const uint64_t e = static_cast<uint64_t>(r * n + j);
          const Philox4 blk = philox_block(philox.seed, philox.offset, e >> 1);
          const double u = philox_uniform_double(blk.v[(e & 1) * 2], blk.v[(e & 1) * 2 + 1]);
          keys.emplace_back(-std::log1p(-u) / p, j);
        }
        std::partial_sort(keys.begin(), keys.begin() + num_samples, keys.end());
        for (int64_t s = 0; s < num_samples; ++s) dst[s] = keys[static_cast<size_t>(s)].second;
      }
    }
  });

  for (const std::string& e : errors) {
    if (!e.empty()) throw Error(e);
  }
}

}  // namespace kiln
