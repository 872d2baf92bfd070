// The autograd tape. Each differentiable op records a Node holding what its backward needs; the
// engine walks nodes in a deterministic order (latest-created first among the ready ones) and
// accumulates into .grad in place when a gradient already exists, so .grad can be a view into a
// flat buffer. Saved tensors remember their version and refuse to be used after an in-place change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// What a node knows about each of its forward outputs, to make zeros for a missing gradient.
struct OutputMeta {
  Shape sizes;
  DType dtype = DType::Float32;
  Device device;
};

using GradHook = std::function<Tensor(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();  // iterative: a long graph is freed without deep recursion
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // Gradients of the forward inputs (one per next edge; undefined = no gradient) from gradients
  // of the forward outputs (one per output, zeros filled in by the engine).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Frees saved tensors once backward ran without retain_graph.
  virtual void release_saved() {}

  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge>& next_edges() { return next_edges_; }
  std::vector<OutputMeta>& output_meta() { return output_meta_; }
  // Hooks on the gradient of forward output `output_nr`, run before apply.
  std::vector<std::pair<uint32_t, GradHook>>& pre_hooks() { return pre_hooks_; }
  // Shapes of the forward inputs, for anomaly messages.
  std::string forward_context;

 protected:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> output_meta_;
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks_;
  uint64_t sequence_nr_;
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves only
  // retain_grad: the node output whose gradient .grad keeps (the tensor's current history). Compared
  // only, never dereferenced: the hook that reads it lives on that node.
  const Node* retain_node = nullptr;
  uint32_t retain_nr = 0;
  std::vector<GradHook> leaf_hooks;  // leaves: run on the gradient before it is accumulated
  std::vector<std::function<void(Tensor&)>> post_accumulate_hooks;
  // A leaf's: held while its gradient accumulator is made and while it accumulates (hooks included),
  // so that backward passes on several threads into one leaf add every gradient once (as PyTorch's
  // AccumulateGrad). Recursive: a hook may record ops on the leaf or run a backward into it.
  std::recursive_mutex mutex;
};

// A tensor kept for backward: a detached alias plus the version it had when saved.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // The saved tensor; an AutogradError if it was released or modified in place since.
  Tensor unpack() const;
  bool defined() const { return saved_ || released_; }
  void release() {
    if (saved_) released_ = true;
    tensor_ = Tensor();
  }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  const char* op_ = "";
  bool saved_ = false;
  bool released_ = false;
};

// The node most ops record: a backward function over its saved tensors.
class FunctionNode final : public Node {
 public:
  struct Context {
    const TensorList& grads;          // one per differentiable forward output
    const std::vector<SavedTensor>& saved;
    const std::vector<bool>& needs_input_grad;
    Tensor saved_at(size_t i) const { return saved.at(i).unpack(); }
  };
  using BackwardFn = std::function<TensorList(const Context&)>;

  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grad_outputs) override;
  void release_saved() override;

  std::vector<SavedTensor> saved;
  std::vector<bool> needs_input_grad;

 private:
  std::string name_;
  BackwardFn fn_;
  bool released_ = false;
};

// --- recording ---------------------------------------------------------------------------
// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const TensorList& inputs);

// Records `name`'s backward: edges to `inputs`' histories, `saved` tensors, and makes `outputs`
// (the differentiable ones, in order) its outputs. Call only when needs_grad(inputs).
// Returns the node so callers can add to it.
std::shared_ptr<FunctionNode> record_function(const char* name, const TensorList& inputs, const TensorList& outputs,
                                              const TensorList& saved, FunctionNode::BackwardFn fn);

// The edge gradients for `t` flow along: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);
// Replaces `t`'s history with output `output_nr` of `fn` (used by ops and in-place ops).
void set_history(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr);

// --- views of a base changed in place (TensorImpl::view_base) ---------------------------------
namespace detail {
// Called for each view made with grad mode on: remembers the base that `view` shares memory with
// (`of`, or `of`'s base when `of` is such a view itself; none when `of` is a view without one, such
// as a detach() alias, whose history never changes) and that base's history now.
void remember_view_base(TensorImpl& view, const Tensor& of);
// Gives `view` a new history when its base got another since the view's was made: a node whose
// backward puts the view's gradient into a zero gradient of the base's shape, on an edge to the
// base's current history. Hooks on the view's gradient move to the new node. Without a lock, one
// pointer comparison when nothing changed.
void refresh_view_history(const std::shared_ptr<TensorImpl>& view);
}  // namespace detail

// --- the engine --------------------------------------------------------------------------
// Runs backward from `roots` with seed gradients `grad_roots` (undefined: ones for one element).
void run_backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph);
// Gradients of `outputs` with respect to `inputs`, returned instead of accumulated into .grad. Only
// the part of the graph between them runs, as PyTorch's autograd.grad: the nodes below the inputs
// keep their saved tensors and hooks and no .grad changes there. The hooks on the way run as in
// backward, those of a leaf input too (what they return is what comes back); a leaf's
// post-accumulate hooks do not (nothing is accumulated).
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false);
namespace detail {
// grad() without the leaf inputs' hooks: for a node that hands the gradients it gets on to the
// engine around it, whose accumulators run those hooks then (checkpoint's recompute).
TensorList grad_without_leaf_hooks(const TensorList& outputs, const TensorList& inputs,
                                   const TensorList& grad_outputs, bool retain_graph, bool allow_unused);
}  // namespace detail
// Runs `callback` once when the current backward pass finishes (the innermost one, when a backward
// runs inside another: a reentrant recompute's).
// Only valid while a backward pass runs (from a hook); otherwise an AutogradError.
void queue_backward_callback(std::function<void()> callback);
// Runs `callback` once when the outermost backward pass running on this thread finishes: what a
// data-parallel gradient reduction needs to wait for its last buckets, as the gradients a nested
// backward accumulates belong to the pass around it.
// Only valid while a backward pass runs (from a hook); otherwise an AutogradError.
void queue_outer_backward_callback(std::function<void()> callback);

// Anomaly mode: off by default. When on, every gradient a node produces is checked for NaN and
// the error names the forward op whose backward made it.
bool anomaly_mode_enabled();
void set_anomaly_mode(bool enabled);
class AnomalyModeGuard {
 public:
  explicit AnomalyModeGuard(bool enabled = true) : prev_(anomaly_mode_enabled()) { set_anomaly_mode(enabled); }
  ~AnomalyModeGuard() { set_anomaly_mode(prev_); }
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;

 private:
  bool prev_;
};

// --- debugging ---------------------------------------------------------------------------------
// Bytes of the distinct storages that the saved tensors (FunctionNode::saved) of the graph behind
// `root` keep alive: what that graph costs in memory until its backward runs. A storage shared by
// several saved tensors (or views of one tensor) counts once, and whole, as it is held whole.
// Saved tensors already released by a backward, or modified in place since they were saved (their
// backward would refuse them), are not counted. 0 for a tensor without history.
int64_t saved_tensor_bytes(const Tensor& root);

}  // namespace kiln
