// CPU random draws: fills read element i's words straight from Philox by index (no sequential state),
// so the work splits over threads freely, and each thread takes its blocks from cpu::PhiloxLanes;
// multinomial checks each row's weights, then samples by cumulative sums (with replacement) or an
// exponential race (without).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox_lanes.h"
#include "kernels/error.h"
#include "kernels/random.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

constexpr int64_t kGrain = 16384;

std::string format_value(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Element i of the fill, in logical order, at `off`: words (i & 1) * 2 and (i & 1) * 2 + 1 of block
// i >> 1, or the whole block i for a float64 normal.
template <RandomDist D>
void fill(const StridedArg& out, const RandomParams& p, const PhiloxState& philox) {
  const double a = p.a, b = p.b;
  const int64_t* strides[1] = {out.strides};
  const bool dbl = out.dtype == DType::Float64;
  const int digits = uniform_digits(out.dtype);
  const double cap = uniform_cap(a, b, out.dtype);
  cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
    cpu::PhiloxLanes lanes(philox);
    int64_t i = b0;
    cpu::nd_rows<1>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* at, int64_t count, const int64_t* step) {
      int64_t off = at[0];
      for (int64_t k = 0; k < count; ++k, ++i, off += step[0]) {
        const auto u = static_cast<uint64_t>(i);
        if (D == RandomDist::Normal && dbl) {
          // Box-Muller; u1 in (0, 1] keeps the log finite.
          const double u1 = 1.0 - philox_uniform_double(lanes.word(u, 0), lanes.word(u, 1));
          const double u2 = philox_uniform_double(lanes.word(u, 2), lanes.word(u, 3));
          const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
          store_as<double>(out.data, out.dtype, off, a + b * z);
          continue;
        }
        const int w = static_cast<int>(u & 1) * 2;
        const uint32_t w0 = lanes.word(u >> 1, w), w1 = lanes.word(u >> 1, w + 1);
        if constexpr (D == RandomDist::Uniform) {
          if (dbl) {
            store_as<double>(out.data, out.dtype, off, std::fmin(a + (b - a) * philox_uniform_double(w0, w1), cap));
          } else {
            const float f = static_cast<float>(a) + static_cast<float>(b - a) * philox_uniform_digits(w0, digits);
            store_as<float>(out.data, out.dtype, off, std::fmin(f, static_cast<float>(cap)));
          }
        } else if constexpr (D == RandomDist::Normal) {
          const float u1 = 1.0f - philox_uniform(w0);
          const float u2 = philox_uniform(w1);
          const float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795865f * u2);
          store_as<float>(out.data, out.dtype, off, static_cast<float>(a) + static_cast<float>(b) * z);
        } else {
          // [low, low + range): 64 random bits modulo the range, added in uint64 (wraps as int64).
          const uint64_t bits = (static_cast<uint64_t>(w0) << 32) | w1;
          store_as<int64_t>(out.data, out.dtype, off,
                            static_cast<int64_t>(static_cast<uint64_t>(p.low) + bits % p.range));
        }
      }
    });
  });
}

}  // namespace

void random_cpu(const StridedArg& out, RandomDist dist, const RandomParams& p, PhiloxState philox,
                const KernelContext&) {
  philox = philox_resolve(philox);
  switch (dist) {
    case RandomDist::Uniform: fill<RandomDist::Uniform>(out, p, philox); return;
    case RandomDist::Normal: fill<RandomDist::Normal>(out, p, philox); return;
    case RandomDist::RandInt: fill<RandomDist::RandInt>(out, p, philox); return;
  }
}

void multinomial_cpu(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                     PhiloxState philox, const KernelContext&) {
  philox = philox_resolve(philox);
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

void philox_base_store_cpu(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext&) {
  base[0] = seed;
  base[1] = offset;
}

}  // namespace kiln
