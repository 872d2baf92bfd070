// ctc_loss: the forward recursion over the blank-extended labels, in log space, composed of ops.
#include "core/ops/ctc_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/ops/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "kernels/error.h"

namespace kiln {

namespace {

// The log-probability of an impossible state: finite, so that logsumexp over three impossible
// states has a finite gradient (0 / 0 with -inf), yet far below any sum of log-probabilities. A
// loss past kImpossible is infinite.
constexpr double kNeg = -1e30;
constexpr double kImpossible = 1e29;

std::vector<int64_t> host_lengths(const char* op, const Tensor& t, const char* name) {
  ops::check_defined(op, t, name);
  if (is_floating(t.dtype()) || t.dtype() == DType::Bool || t.dim() > 1) {
    throw Error(std::string(op) + ": " + name + " must be an integer tensor, 0-d or 1-d, got " + dtype_name(t.dtype()) +
                " " + shape_str(t.sizes()));
  }
  return t.to_vector<int64_t>();
}

// The targets as [N, S] int64 on log_probs' device: padded ones as they are, concatenated ones
// gathered into rows (each row repeats its last label past its length; those positions are never
// read back).
Tensor padded_targets(const char* op, const Tensor& targets, const std::vector<int64_t>& lengths, bool batched,
                      Device device) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  if (!batched) {
    if (targets.dim() != 1) {
      throw ShapeError(std::string(op) + ": unbatched targets must be 1-d, got " + shape_str(targets.sizes()));
    }
    return to_dtype(targets, DType::Int64).unsqueeze(0).to(device);
  }
  if (targets.dim() == 2) {
    if (targets.size(0) != n) {
      throw ShapeError(std::string(op) + ": padded targets " + shape_str(targets.sizes()) +
                       " need one row per sample (" + std::to_string(n) + ")");
    }
    return to_dtype(targets, DType::Int64).to(device);
  }
  if (targets.dim() != 1) {
    throw ShapeError(std::string(op) + ": targets must be [N, S] padded or 1-d concatenated, got " +
                     shape_str(targets.sizes()));
  }
  int64_t total = 0, widest = 0;
  for (int64_t l : lengths) total += l, widest = std::max(widest, l);
  if (total != targets.numel()) {
    throw ShapeError(std::string(op) + ": concatenated targets " + shape_str(targets.sizes()) +
                     " must hold the sum of target_lengths " + shape_str(lengths) + " = " + std::to_string(total));
  }
  std::vector<int64_t> index(static_cast<size_t>(n * widest), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t s = 0; s < widest; ++s) {
      const int64_t at = lengths[static_cast<size_t>(i)] == 0 ? 0 : std::min(s, lengths[static_cast<size_t>(i)] - 1);
      index[static_cast<size_t>(i * widest + s)] = std::min(offset + at, std::max<int64_t>(total - 1, 0));
    }
    offset += lengths[static_cast<size_t>(i)];
  }
  if (total == 0) return zeros({n, widest}, TensorOptions(DType::Int64, device));
  const Tensor flat = to_dtype(targets, DType::Int64).to(device);
  return index_select(flat, 0, tensor(index, {n * widest}, TensorOptions(DType::Int64, device))).reshape({n, widest});
}

// Every counted label in [0, C) and not blank (CPU targets only: reading CUDA ones would sync).
void check_labels(const char* op, const Tensor& padded, const std::vector<int64_t>& lengths, int64_t classes,
                  int64_t blank) {
  if (!padded.device().is_cpu()) return;
  const Tensor h = padded.contiguous();
  const int64_t* v = h.data_ptr<int64_t>();
  const int64_t width = h.size(1);
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (int64_t s = 0; s < lengths[i]; ++s) {
      const int64_t label = v[static_cast<int64_t>(i) * width + s];
      if (label < 0 || label >= classes || label == blank) {
        throw Error(std::string(op) + ": target " + std::to_string(i) + " holds label " + std::to_string(label) +
                    " at position " + std::to_string(s) + " (labels are classes in [0, " + std::to_string(classes) +
                    ") other than blank " + std::to_string(blank) + ")");
      }
    }
  }
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  const char* op = "ctc_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&log_probs})) {
    return ctc_loss((*c)[0], targets, input_lengths, target_lengths, blank, reduction, zero_infinity);
  }
  ops::check_defined(op, log_probs, "log_probs");
  ops::check_defined(op, targets, "targets");
  detail::check_reduction(op, reduction);
  if (log_probs.dim() != 2 && log_probs.dim() != 3) {
    throw ShapeError(std::string(op) + ": log_probs must be [T, N, C] or unbatched [T, C], got " +
                     shape_str(log_probs.sizes()));
  }
  ops::check_floating(op, log_probs, "log_probs");
  if (is_floating(targets.dtype()) || targets.dtype() == DType::Bool) {
    throw DTypeError(std::string(op) + ": targets must hold integer class indices, got " + dtype_name(targets.dtype()));
  }
  const bool batched = log_probs.dim() == 3;
  const Tensor x = batched ? log_probs : log_probs.unsqueeze(1);
  const int64_t frames = x.size(0), n = x.size(1), classes = x.size(2);
  if (blank < 0 || blank >= classes) {
    throw Error(std::string(op) + ": blank " + std::to_string(blank) + " is not a class of log_probs " +
                shape_str(log_probs.sizes()) + " (C = " + std::to_string(classes) + ")");
  }
  if (static_cast<int64_t>(input_lengths.size()) != n || static_cast<int64_t>(target_lengths.size()) != n) {
    throw ShapeError(std::string(op) + ": input_lengths " + shape_str(input_lengths) + " and target_lengths " +
                     shape_str(target_lengths) + " need one entry per sample of log_probs " +
                     shape_str(log_probs.sizes()));
  }
  const Device device = log_probs.device();
  const Tensor labels = padded_targets(op, targets, target_lengths, batched, device);
  const int64_t width = labels.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t il = input_lengths[static_cast<size_t>(i)], tl = target_lengths[static_cast<size_t>(i)];
    if (il < 0 || il > frames) {
      throw Error(std::string(op) + ": input_lengths " + shape_str(input_lengths) +
                  " must lie in [0, T = " + std::to_string(frames) + "]");
    }
    if (tl < 0 || tl > width) {
      throw Error(std::string(op) + ": target_lengths " + shape_str(target_lengths) + " must lie in [0, " +
                  std::to_string(width) + "] for targets " + shape_str(targets.sizes()));
    }
  }
  check_labels(op, labels, target_lengths, classes, blank);

  // The extended labels [N, L = 2S + 1]: blank, l1, blank, l2, ..., blank. A step may skip the
  // blank before a label that differs from the one two back.
  const int64_t extended = 2 * width + 1;
  const Tensor blanks = full({n, width}, blank, TensorOptions(DType::Int64, device));
  const Tensor ext = cat(
      {stack({blanks, labels}, 2).reshape({n, 2 * width}), full({n, 1}, blank, TensorOptions(DType::Int64, device))},
      1);
  const Tensor two_back =
      cat({full({n, 2}, blank, TensorOptions(DType::Int64, device)), ext.narrow(1, 0, extended - 2)}, 1);
  const Tensor may_skip = logical_and(ne(ext, blank), ne(ext, two_back));

  const DType work = ops::widened_dtype(log_probs.dtype());
  const Tensor frame_scores = gather(to_dtype(x, work), 2, ext.unsqueeze(0).expand({frames, n, extended}));
  const TensorOptions real(work, device);
  const Tensor impossible = full({n, 2}, kNeg, real);
  const Tensor frames_left = tensor(input_lengths, {n, 1}, TensorOptions(DType::Int64, device));

  // alpha before the first frame: the empty prefix, at the leading blank's position, is certain.
  Tensor alpha =
      where(eq(arange(0, extended, 1, TensorOptions(DType::Int64, device)), 0), 0.0, full({n, extended}, kNeg, real));
  const int64_t longest = *std::max_element(input_lengths.begin(), input_lengths.end());
  for (int64_t t = 0; t < longest; ++t) {
    const Tensor one_back = cat({impossible.narrow(1, 0, 1), alpha.narrow(1, 0, extended - 1)}, 1);
    const Tensor skip = where(may_skip, cat({impossible, alpha.narrow(1, 0, extended - 2)}, 1), kNeg);
    const Tensor next = add(logsumexp(stack({alpha, one_back, skip}, 0), {0}), frame_scores.select(0, t));
    alpha = where(gt(frames_left, t), next, alpha);
  }

  // The paths end on the last label or the blank after it: positions 2 tl and 2 tl - 1.
  std::vector<int64_t> ends(static_cast<size_t>(2 * n));
  std::vector<bool> has_label(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t tl = target_lengths[static_cast<size_t>(i)];
    ends[static_cast<size_t>(2 * i)] = 2 * tl;
    ends[static_cast<size_t>(2 * i + 1)] = std::max<int64_t>(2 * tl - 1, 0);
    has_label[static_cast<size_t>(2 * i)] = true;
    has_label[static_cast<size_t>(2 * i + 1)] = tl > 0;
  }
  const Tensor end_scores = where(tensor(has_label, {n, 2}, TensorOptions(DType::Bool, device)),
                                  gather(alpha, 1, tensor(ends, {n, 2}, TensorOptions(DType::Int64, device))), kNeg);
  const Tensor nll = neg(logsumexp(end_scores, {1}));
  const double infinite_value = zero_infinity ? 0.0 : std::numeric_limits<double>::infinity();
  Tensor losses = where(ge(nll, kImpossible), infinite_value, nll);

  if (reduction == Reduction::Mean) {
    std::vector<double> per_label(target_lengths.size());
    for (size_t i = 0; i < per_label.size(); ++i)
      per_label[i] = static_cast<double>(std::max<int64_t>(target_lengths[i], 1));
    losses = mean(div(losses, tensor(per_label, {n}, TensorOptions(work, device))));
  } else if (reduction == Reduction::Sum) {
    losses = sum(losses);
  } else if (!batched) {
    losses = losses.squeeze(0);
  }
  return to_dtype(losses, log_probs.dtype());
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  const char* op = "ctc_loss";
  const std::vector<int64_t> frames = host_lengths(op, input_lengths, "input_lengths");
  const std::vector<int64_t> labels = host_lengths(op, target_lengths, "target_lengths");
  return ctc_loss(log_probs, targets, frames, labels, blank, reduction, zero_infinity);
}

}  // namespace kiln
