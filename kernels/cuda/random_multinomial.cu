// CUDA multinomial: the launches of kernels/cuda/random_multinomial.cuh on the context's stream,
// with a workspace for as many rows as fit under sort.cuh's cap.
#include "kernels/cuda/random_multinomial.cuh"

namespace kiln {

void multinomial_cuda(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                      PhiloxState philox, const KernelContext& ctx) {
  const MultinomialRows m = multinomial_rows(probs);
  if (m.rows <= 0 || num_samples <= 0) return;
  check_row_length("multinomial", m.n);
  const size_t bytes = capped(m.rows, multinomial_row_bytes(m.n, num_samples, replacement));
  multinomial_launches(out, probs, num_samples, replacement, philox, ctx.workspace(bytes), bytes, ctx.error_record(),
                       StreamLaunch{raw_stream(ctx.stream), "multinomial"});
}

}  // namespace kiln
