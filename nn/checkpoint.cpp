// Activation recompute. Forward runs fn under NoGradGuard and records one FunctionNode over the
// inputs and the listed params that saves only the inputs. Its backward runs fn again on detached
// copies of the inputs and differentiates the recomputed outputs with kiln::grad, returning the
// gradients of inputs and params alike: the caller's engine then accumulates the params' .grad,
// so nothing about a parameter's gradient depends on whether its segment was recomputed. Only a
// tensor fn reads without it being listed forces the reentrant way (a nested backward into .grad).
// Random draws are replayed through Generator::position, which also counts a CUDA graph
// capture's draws, so a recompute inside a capture draws forward's dropout masks too.
#include "nn/checkpoint.h"

#include <atomic>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln::nn {
namespace {

std::atomic<bool> g_fallback_warned{false};

void warn_once(std::atomic<bool>& warned, const std::string& message) {
  if (!warned.exchange(true) && log_enabled(LogLevel::Warn)) log_message(LogLevel::Warn, message + " (warned once)");
}

// The sequence number the next node will get: nodes numbered below it existed before the
// recompute, so a recomputed graph that reaches one (other than a leaf's accumulator) has run into
// history that fn read from outside its inputs.
class SequenceMark final : public Node {
 public:
  std::string name() const override { return "checkpoint mark"; }
  TensorList apply(TensorList&&) override { return {}; }
};

uint64_t next_sequence_nr() {
  const SequenceMark mark;
  return mark.sequence_nr() + 1;
}

// The random state fn ran with: every generator it may have drawn from, with its seed and its
// position before fn (the host offset, or the draw count of a CUDA graph capture in progress).
struct RngState {
  Generator generator;
  uint64_t seed, position;
};
using RngStates = std::vector<RngState>;

RngState state_of(const Generator& g) { return RngState{g, g.seed(), g.position()}; }

// Puts g at `s`: its seed too, should it have been reseeded since (manual_seed between forward and
// backward would otherwise give the recompute other masks).
void put_back(const RngState& s) {
  Generator g = s.generator;
  if (g.seed() != s.seed) g.manual_seed(s.seed);
  g.set_position(s.position);
}

void add_generator(RngStates& states, const Generator& g) {
  for (const RngState& entry : states)
    if (entry.generator == g) return;
  states.push_back(state_of(g));
}

RngStates save_rng(const TensorList& inputs, const TensorList& params, const std::vector<Generator>& extra) {
  RngStates states;
  add_generator(states, default_generator(Device::cpu()));
  for (const TensorList* list : {&inputs, &params}) {
    for (const Tensor& t : *list)
      if (t.defined() && t.is_cuda()) add_generator(states, default_generator(t.device()));
  }
  for (const Generator& g : extra) add_generator(states, g);
  return states;
}

// Puts the forward's random states in place for the recompute and, when it ends (normally or by
// an exception), the states found on entry: the draws made between forward and backward (later
// segments, other work) stay made, so the stream after a recomputed step is the one without.
// Under a CUDA graph capture the positions are the capture's draw counts (core/random.h).
class RngRewind {
 public:
  explicit RngRewind(const RngStates& forward) {
    for (const RngState& s : forward) {
      entry_.push_back(state_of(s.generator));
      put_back(s);
    }
  }
  ~RngRewind() {
    for (const RngState& s : entry_) put_back(s);
  }
  RngRewind(const RngRewind&) = delete;
  RngRewind& operator=(const RngRewind&) = delete;

 private:
  RngStates entry_;
};

// Buffers fn changed in forward: their values are copied before the recompute and written back
// after it, so BatchNorm's running statistics see each batch once, as without recompute.
class BufferRestore {
 public:
  explicit BufferRestore(const TensorList& changed) {
    NoGradGuard no_grad;
    for (const Tensor& b : changed) saved_.emplace_back(b, b.clone());
  }
  void restore() {
    NoGradGuard no_grad;
    for (auto& [b, copy] : saved_) b.copy_(copy);
    saved_.clear();
  }

 private:
  std::vector<std::pair<Tensor, Tensor>> saved_;
};

void append_unique(TensorList& list, const Tensor& t) {
  if (!t.defined()) return;
  for (const Tensor& u : list)
    if (u.is_same(t)) return;
  list.push_back(t);
}

void check_outputs(const char* when, const TensorList& outputs) {
  if (outputs.empty()) throw Error(std::string("checkpoint: fn returned no tensors ") + when);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].defined()) {
      throw Error(std::string("checkpoint: fn returned an undefined tensor at output ") + std::to_string(k) + " of " +
                  std::to_string(outputs.size()) + " " + when);
    }
  }
}

// What forward knew of an output, to check the recompute against.
struct OutputInfo {
  Shape sizes;
  DType dtype;
  bool differentiable;
};

// Everything the node's backward needs besides the saved inputs.
struct Recompute {
  CheckpointFn fn;
  size_t num_inputs = 0;
  TensorList params;  // the node's inputs after the forward inputs, in order
  std::vector<OutputInfo> outputs;
  AutocastSnapshot autocast;
  bool preserve_rng = true;
  RngStates rng;
  TensorList changed_buffers;
};

// Walks the recomputed graph from `roots`. Returns the shapes of leaves that require grad and are
// neither detached inputs nor listed params (`listed`), and throws when the graph reaches a node
// older than the recompute: history fn read from outside (a backward through it would run that
// history's backward a second time, reentrantly).
std::vector<Shape> scan_recomputed(const TensorList& roots, const std::unordered_set<const Node*>& listed,
                                   uint64_t first_seq) {
  std::vector<Shape> unlisted;
  std::unordered_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  for (const Tensor& r : roots) {
    Edge e = gradient_edge(r);
    if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn);
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    // A leaf's gradient sink (core/autograd.cpp names it so); it has no edges of its own.
    if (n->name() == "AccumulateGrad") {
      if (!listed.count(n.get())) unlisted.push_back(n->output_meta().at(0).sizes);
      continue;
    }
    if (n->sequence_nr() < first_seq) {
      throw AutogradError("checkpoint: fn reads a tensor with autograd history (made by " + n->name() +
                          ") that is not among its inputs; pass it as an input so its gradient flows through the "
                          "checkpoint");
    }
    for (const Edge& e : n->next_edges())
      if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn);
  }
  return unlisted;
}

std::string shapes_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shape_str(shapes[i]);
  return s;
}

TensorList checkpoint_backward(const Recompute& rc, const FunctionNode::Context& ctx) {
  const size_t n_in = rc.num_inputs, n_params = rc.params.size();
  TensorList result(n_in + n_params);

  // Detached copies of the inputs: the recompute's graph ends at them instead of running into the
  // caller's graph, and the gradients arriving there are this node's to return.
  TensorList inputs(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    Tensor saved = ctx.saved_at(i);  // refuses an input modified in place since forward
    if (!saved.defined()) continue;
    inputs[i] = saved.detach();
    if (ctx.needs_input_grad[i]) inputs[i].set_requires_grad(true);
  }

  const uint64_t first_seq = next_sequence_nr();
  TensorList outputs;
  {
    BufferRestore buffers(rc.changed_buffers);
    std::optional<RngRewind> rewind;
    if (rc.preserve_rng) rewind.emplace(rc.rng);
    try {
      EnableGradGuard grad_on;
      AutocastCacheScope own_casts;  // casts made here, not the forward's or another recompute's
      AutocastSnapshotGuard autocast(rc.autocast);
      outputs = rc.fn(inputs);
    } catch (...) {
      buffers.restore();
      throw;
    }
    buffers.restore();
  }
  check_outputs("in the recompute", outputs);
  if (outputs.size() != rc.outputs.size()) {
    throw Error("checkpoint: the recompute returned " + std::to_string(outputs.size()) + " tensors, forward returned " +
                std::to_string(rc.outputs.size()) + "; fn must return the same outputs each time it runs");
  }
  TensorList roots, root_grads;
  size_t diff = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const OutputInfo& info = rc.outputs[k];
    if (!info.differentiable) continue;
    const Tensor& out = outputs[k];
    if (out.sizes() != info.sizes || out.dtype() != info.dtype) {
      throw Error("checkpoint: output " + std::to_string(k) + " of the recompute is " + shape_str(out.sizes()) + " " +
                  dtype_name(out.dtype()) + ", forward's was " + shape_str(info.sizes) + " " +
                  dtype_name(info.dtype) + "; fn must return the same outputs each time it runs (did autocast "
                  "or the module's mode change?)");
    }
    if (out.requires_grad()) {
      roots.push_back(out);
      root_grads.push_back(ctx.grads.at(diff));
    }
    ++diff;
  }
  if (roots.empty()) return result;  // no output depends on anything that needs a gradient

  // The leaves whose gradients this node returns, and the node input each one answers for.
  TensorList targets;
  std::vector<size_t> slots;
  std::vector<std::shared_ptr<Node>> keep;  // holds accumulators made here while `listed` uses them
  std::unordered_set<const Node*> listed;
  auto add_target = [&](const Tensor& t, size_t slot) {
    targets.push_back(t);
    slots.push_back(slot);
    Edge e = gradient_edge(t);
    listed.insert(e.fn.get());
    keep.push_back(std::move(e.fn));
  };
  for (size_t i = 0; i < n_in; ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) add_target(inputs[i], i);
  for (size_t j = 0; j < n_params; ++j)
    if (ctx.needs_input_grad[n_in + j] && rc.params[j].requires_grad()) add_target(rc.params[j], n_in + j);

  const std::vector<Shape> unlisted = scan_recomputed(roots, listed, first_seq);
  if (unlisted.empty()) {
    if (targets.empty()) return result;
    // The listed parameters' hooks run when this node's caller accumulates what it returns.
    TensorList grads =
        kiln::detail::grad_without_leaf_hooks(roots, targets, root_grads, /*retain_graph=*/false, /*allow_unused=*/true);
    for (size_t t = 0; t < targets.size(); ++t) result[slots[t]] = std::move(grads[t]);
    return result;
  }
  if (n_params > 0) {
    throw AutogradError("checkpoint: fn reads " + std::to_string(unlisted.size()) +
                        " tensor(s) that require grad but are neither inputs nor in CheckpointOptions::params "
                        "(shapes " + shapes_str(unlisted) + "); list every parameter fn uses, or none to let "
                        "their gradients accumulate the reentrant way");
  }
  // Reentrant: a nested backward accumulates every leaf's gradient into its .grad, the unlisted
  // tensors' included; the detached inputs' .grad are this node's answer.
  run_backward(roots, root_grads, /*retain_graph=*/false);
  for (size_t i = 0; i < n_in; ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) result[i] = inputs[i].grad();
  return result;
}

}  // namespace

TensorList checkpoint(CheckpointFn fn, const TensorList& inputs, CheckpointOptions options) {
  if (!fn) throw Error("checkpoint: fn is empty");
  TensorList params;
  for (const Tensor& p : options.params) append_unique(params, p);

  TensorList recorded = inputs;
  recorded.insert(recorded.end(), params.begin(), params.end());
  if (!needs_grad(recorded)) {
    // Nothing to differentiate through a node: fn runs as it is, under the caller's grad mode. When
    // grad mode is on, tensors fn reads without listing them still get their gradients, at the
    // price of keeping fn's intermediates.
    TensorList outputs = fn(inputs);
    check_outputs("in forward", outputs);
    bool any_grad = false;
    for (const Tensor& out : outputs) any_grad = any_grad || out.requires_grad();
    if (any_grad && !params.empty()) {
      throw AutogradError("checkpoint: fn reads tensors that require grad but are neither inputs nor in "
                          "CheckpointOptions::params; list every parameter fn uses");
    }
    if (any_grad) {
      warn_once(g_fallback_warned, "checkpoint: no input requires grad, but fn reads tensors that do: it ran without "
                                   "recompute (its intermediates are kept) so that they get gradients; list them in "
                                   "CheckpointOptions::params to recompute");
    }
    return outputs;
  }

  auto rc = std::make_shared<Recompute>();
  rc->num_inputs = inputs.size();
  rc->params = params;
  rc->autocast = autocast_snapshot();
  rc->preserve_rng = options.preserve_rng_state;
  if (rc->preserve_rng) rc->rng = save_rng(inputs, params, options.generators);

  TensorList buffers;
  for (const Tensor& b : options.buffers) append_unique(buffers, b);
  std::vector<uint64_t> versions;
  for (const Tensor& b : buffers) versions.push_back(b.version());

  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  check_outputs("in forward", outputs);
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].version() != versions[i]) rc->changed_buffers.push_back(buffers[i]);

  TensorList differentiable;
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& out = outputs[k];
    const bool diff = out.is_floating_point();
    rc->outputs.push_back(OutputInfo{out.sizes(), out.dtype(), diff});
    if (!diff) continue;
    // fn may hand back one of its inputs or params, or one tensor twice: the node's output must be
    // a tensor of its own, or recording it would rewrite that tensor's history.
    bool alias = false;
    for (const TensorList* list : {&recorded, &differentiable}) {
      for (const Tensor& t : *list) alias = alias || out.is_same(t);
    }
    if (alias) out = out.detach();
    differentiable.push_back(out);
  }
  rc->fn = std::move(fn);
  record_function("checkpoint", recorded, differentiable, inputs,
                  [rc](const FunctionNode::Context& ctx) { return checkpoint_backward(*rc, ctx); });
  return outputs;
}

Tensor checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input, CheckpointOptions options) {
  if (!fn) throw Error("checkpoint: fn is empty");
  CheckpointFn list_fn = [fn = std::move(fn)](const TensorList& in) { return TensorList{fn(in.at(0))}; };
  return checkpoint(std::move(list_fn), TensorList{input}, std::move(options)).at(0);
}

Tensor checkpoint(const std::shared_ptr<UnaryModule>& module, const Tensor& input, CheckpointOptions options) {
  if (!module) throw Error("checkpoint: the module is null");
  for (const Tensor& p : module->parameters()) options.params.push_back(p);
  for (const auto& [name, b] : module->named_buffers()) options.buffers.push_back(b);
  CheckpointFn fn = [module](const TensorList& in) { return TensorList{(*module)(in.at(0))}; };
  return checkpoint(std::move(fn), TensorList{input}, std::move(options)).at(0);
}

Tensor checkpoint_sequential(const std::vector<std::shared_ptr<UnaryModule>>& modules, int64_t segments,
                             const Tensor& input, CheckpointOptions options) {
  const int64_t n = static_cast<int64_t>(modules.size());
  if (n == 0) throw Error("checkpoint_sequential: there are no modules to run");
  for (int64_t i = 0; i < n; ++i) {
    if (!modules[static_cast<size_t>(i)]) {
      throw Error("checkpoint_sequential: module " + std::to_string(i) + " of " + std::to_string(n) + " is null");
    }
  }
  if (segments < 1 || segments > n) {
    throw Error("checkpoint_sequential: segments must be between 1 and the number of modules (" + std::to_string(n) +
                "), got " + std::to_string(segments));
  }
  const int64_t size = n / segments;
  auto run = [modules](int64_t begin, int64_t end, Tensor x) {
    for (int64_t i = begin; i < end; ++i) x = (*modules[static_cast<size_t>(i)])(x);
    return x;
  };
  Tensor x = input;
  for (int64_t s = 0; s + 1 < segments; ++s) {
    const int64_t begin = s * size, end = begin + size;
    CheckpointOptions seg = options;
    for (int64_t i = begin; i < end; ++i) {
      const auto& m = modules[static_cast<size_t>(i)];
      for (const Tensor& p : m->parameters()) seg.params.push_back(p);
      for (const auto& [name, b] : m->named_buffers()) seg.buffers.push_back(b);
    }
    CheckpointFn fn = [run, begin, end](const TensorList& in) { return TensorList{run(begin, end, in.at(0))}; };
    x = checkpoint(std::move(fn), TensorList{x}, std::move(seg)).at(0);
  }
  return run((segments - 1) * size, n, x);
}

Tensor checkpoint_sequential(const Sequential& modules, int64_t segments, const Tensor& input,
                             CheckpointOptions options) {
  return checkpoint_sequential(std::vector<std::shared_ptr<UnaryModule>>(modules.begin(), modules.end()), segments,
                               input, std::move(options));
}

}  // namespace kiln::nn
