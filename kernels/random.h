// Random draws from Philox (kernels/philox.h): fills with uniform, normal or integer values, and
// multinomial sampling. Element i of a fill, in the output's logical order, uses subsequence i, so
// the result does not depend on how the work is split, and both devices draw the same integers.
#pragma once

#include <cstdint>

#include "kernels/kernel.h"
#include "kernels/philox.h"
#include "kernels/strided.h"

namespace kiln {

// Uniform: [a, b); Normal: mean a, std b (Box-Muller); RandInt: integers in [a, b).
enum class RandomDist : uint8_t { Uniform, Normal, RandInt };

// Element i reads words (i & 1) * 2 and (i & 1) * 2 + 1 of block i >> 1 (float64 normals take a
// whole block of their own). The CUDA twin rounds the affine maps like x86 (no FMA), so only
// log/cos may differ, by an ulp.
void random_cpu(const StridedArg& out, RandomDist dist, double a, double b, PhiloxState philox,
                const KernelContext& ctx);
void random_cuda(const StridedArg& out, RandomDist dist, double a, double b, PhiloxState philox,
                 const KernelContext& ctx);

// out: contiguous int64 [rows, num_samples]; probs: [rows, n] non-negative weights (any strides).
// Element (r, s) of a draw with replacement uses Philox subsequence r * num_samples + s; without
// replacement, category (r, j) gets an exponential key from subsequence r * n + j and the
// num_samples smallest keys win (sequential sampling without replacement in distribution).
// Invalid rows (negative, inf or NaN weights, zero sum, too few non-zero weights) are an Error on
// the CPU. The CUDA twin draws the same categories except where u * total lands within rounding of
// a cumulative-sum boundary (its prefix sum adds in another order) or two exponential keys are
// within an ulp (CUDA's log1p); it cannot throw from the device: an invalid row's outputs are set to
// 0 and the first one found is recorded in the context's error record as
// {op = IndexCheckOp::Multinomial, index = row, size = MultinomialRowError}, raised by the host at
// its next synchronizing call. It sorts keys in scratch memory from the context.
enum class MultinomialRowError : int64_t { InvalidWeight = 1, NegativeWeight, ZeroSum, InfiniteSum, TooFewNonZero };
void multinomial_cpu(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement, PhiloxState philox,
                     const KernelContext& ctx);
void multinomial_cuda(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                      PhiloxState philox, const KernelContext& ctx);

// Writes a generator's {seed, offset} into the two words the draws of a captured graph read
// (PhiloxState::base), in stream order before a replay; the CPU twin stores them at once.
void philox_base_store_cpu(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext& ctx);
void philox_base_store_cuda(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(random);
KILN_KERNEL(philox_base_store);
KILN_KERNEL(multinomial);
}  // namespace kernels

}  // namespace kiln
