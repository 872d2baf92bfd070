// Norms, normalization and distances between vectors (torch.linalg.vector_norm, F.normalize,
// F.cosine_similarity, F.pairwise_distance, torch.cdist): what contrastive and metric-learning
// losses are made of. Composed of reductions and elementwise ops, so both devices run them and
// their gradients are those ops'; a zero vector's norm has gradient 0 (a subgradient) rather than
// the NaN that differentiating sqrt at 0 would give. float16 and bfloat16 inputs are computed on in
// float32 and the result rounded once.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// The ord-norm over `dims` (empty: all): (sum |x|^ord)^(1 / ord) for ord >= 1, max |x| for ord =
// +inf (an empty reduction is an Error: the max of nothing is undefined). Floating inputs;
// float32 under autocast.
Tensor vector_norm(const Tensor& x, double ord = 2.0, const Shape& dims = {}, bool keepdim = false);

// x / max(||x||_p, eps) along `dim`: unit vectors (zero vectors stay zero).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);

// sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along `dim`, x1 and x2 broadcast together;
// the cosine of the angle between the vectors, in [-1, 1]. Where a norm is below eps the clamp's
// gradient is 0 (PyTorch clamps outside autograd and differentiates the unclamped norm).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);

// ||x1 - x2 + eps||_p over the last dim, x1 and x2 broadcast together ([N, D] and [N, D] or [D]
// give [N]); eps keeps the norm of equal vectors away from 0, as PyTorch's.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);

// Every distance between the rows of x1 [*, P, M] and x2 [*, R, M] (batch dims broadcast): [*, P,
// R]. p = 2 with more than 25 rows on either side runs as PyTorch's default does, through a matrix
// product (||a||^2 + ||b||^2 - 2 a.b, clamped at 0: faster, less exact for near points); otherwise,
// and for other p, the norm of each difference.
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);

// The distances between every pair of x's rows ([N, M]), i < j in row-major order: [N (N - 1) /
// 2], torch.nn.functional.pdist (cdist's upper triangle, each distance the norm of its difference).
Tensor pdist(const Tensor& x, double p = 2.0);

}  // namespace kiln
