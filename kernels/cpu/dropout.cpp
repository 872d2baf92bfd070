// CPU dropout: one strided pass over the logical order, so a chunk starting at element b knows
// each element's index (and hence its Philox word) without any per-element index arithmetic, and
// takes the words in order from cpu::PhiloxLanes.
#include "kernels/dropout.h"

#include <cmath>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox_lanes.h"

namespace kiln {
namespace {

constexpr int64_t kGrain = 16384;

template <typename C>
void dropout_typed(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox) {
  const uint32_t threshold = dropout_threshold(p);
  const C scale = p < 1.0 ? static_cast<C>(1.0 / (1.0 - p)) : C(0);
  const int64_t* strides[2] = {out.strides, in.strides};
  cpu::parallel_for(out.numel(), kGrain, [&](int64_t, int64_t b0, int64_t e0) {
    cpu::PhiloxLanes lanes(philox);
    int64_t i = b0;
    cpu::nd_loop<2>(out.ndim, out.sizes, strides, b0, e0, [&](const int64_t* off) {
      const auto u = static_cast<uint64_t>(i);
      const bool keep = (lanes.word(u >> 1, static_cast<int>(u & 1) * 2) >> 8) >= threshold;
      // A dropped element is written as 0, not x * 0, so an inf or NaN there does not leak through.
      C v = keep ? cpu::load_as<C>(in.data, in.dtype, off[1]) * scale : C(0);
      cpu::store_as<C>(out.data, out.dtype, off[0], v);
      ++i;
    });
  });
}

}  // namespace

uint32_t dropout_threshold(double p) {
  // u = (word >> 8) / 2^24 exactly, so u >= p  <=>  (word >> 8) >= ceil(p * 2^24); p * 2^24 is exact.
  double t = std::ceil(p * 16777216.0);
  if (t <= 0) return 0;
  if (t >= 16777216.0) return 16777216u;  // p == 1: no 24-bit value reaches it, nothing is kept
  return static_cast<uint32_t>(t);
}

void dropout_cpu(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox, const KernelContext&) {
  philox = philox_resolve(philox);
  if (out.dtype == DType::Float64) {
    dropout_typed<double>(out, in, p, philox);
  } else {
    dropout_typed<float>(out, in, p, philox);
  }
}

}  // namespace kiln
