// The autograd engine and the tensor-side autograd API.
// Nodes run in a deterministic order: among the nodes whose inputs are complete, the one created
// last goes first, so the order depends on the graph alone and never on timing.
#include "core/autograd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/autocast.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {
namespace {

std::atomic<uint64_t> g_sequence_nr{0};
std::atomic<bool> g_anomaly{false};
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
thread_local std::vector<std::function<void()>>* t_outer_callbacks = nullptr;  // the outermost pass's

// A hook's replacement for the gradient `g` (undefined: keep g). It must look like g: the engine and
// .grad trust a gradient's shape, dtype and device. A hook may change values only.
Tensor hook_result(const Tensor& g, const Tensor& r, const char* where) {
  if (!r.defined()) return g;
  if (r.sizes() != g.sizes() || r.dtype() != g.dtype() || r.device() != g.device()) {
    throw AutogradError(std::string("register_hook: a hook on ") + where + " returned a gradient of shape " +
                        shape_str(r.sizes()) + " " + dtype_name(r.dtype()) + " on " + r.device().str() +
                        " for one of shape " + shape_str(g.sizes()) + " " + dtype_name(g.dtype()) + " on " +
                        g.device().str() + "; a hook may change a gradient's values, not its shape, dtype or device");
  }
  return r;
}

// retain_grad's hook on output `nr` of `node`: keeps the gradient arriving there in the tensor's
// .grad, as long as that output is still the tensor's history (an in-place op gives the tensor a new
// one, and set_history moves the hook along: the gradient is the current value's).
void attach_retain_hook(const std::shared_ptr<TensorImpl>& impl, Node& node, uint32_t nr) {
  AutogradMeta& meta = impl->autograd_meta();
  meta.retain_node = &node;
  meta.retain_nr = nr;
  std::weak_ptr<TensorImpl> weak = impl;
  const Node* at = &node;
  node.pre_hooks().emplace_back(nr, [weak, at, nr](const Tensor& g) {
    if (auto t = weak.lock()) {
      AutogradMeta& m = t->autograd_meta();
      if (m.retains_grad && m.retain_node == at && m.retain_nr == nr) {
        m.grad = m.grad.defined() ? add(m.grad, g) : g.detach().clone();
      }
    }
    return Tensor();
  });
}

// Gradient sink of a leaf: accumulates into .grad, in place when a gradient already exists.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    output_meta_.push_back(OutputMeta{leaf_->sizes, leaf_->dtype, leaf_->storage->device()});
  }
  std::string name() const override { return "AccumulateGrad"; }

  // The leaf's hooks (register_hook) on its incoming gradient, in the order they were registered.
  Tensor run_hooks(Tensor g) const {
    for (auto& hook : leaf_->autograd_meta().leaf_hooks) g = hook_result(g, hook(g), "a leaf");
    return g;
  }

  TensorList apply(TensorList&& grads) override {
    AutogradMeta& meta = leaf_->autograd_meta();
    const std::lock_guard<std::recursive_mutex> lock(meta.mutex);
    Tensor g = run_hooks(std::move(grads[0]));
    Tensor& dst = meta.grad;
    Tensor leaf(leaf_);
    if (!dst.defined()) {
      // The gradient takes its parameter's layout (a channels-last weight gets a channels-last
      // gradient, a contiguous one a contiguous gradient, whatever strides backward produced): the
      // incoming buffer when nobody else can see it and it already has that layout, else a copy.
      const bool dense_leaf = leaf.is_non_overlapping_and_dense();
      const bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.is_view() &&
                             g.is_non_overlapping_and_dense() && (!dense_leaf || same_layout(g, leaf));
      if (exclusive) {
        dst = g;
      } else if (dense_leaf) {
        dst = empty_strided(leaf.sizes(), leaf.strides(), TensorOptions(g.dtype(), g.device()));
        dst.copy_(g.detach());
      } else {
        dst = g.detach().clone(MemoryFormat::Contiguous);
      }
    } else {
      // set_grad checks what it stores; a .grad replaced through mutable_grad() is checked here,
      // before a broadcast or another dtype could make it silently wrong.
      if (dst.sizes() != leaf.sizes() || dst.dtype() != leaf.dtype() || dst.device() != leaf.device()) {
        throw AutogradError("AccumulateGrad: the .grad of a leaf of shape " + shape_str(leaf.sizes()) + " " +
                            dtype_name(leaf.dtype()) + " on " + leaf.device().str() + " is " +
                            shape_str(dst.sizes()) + " " + dtype_name(dst.dtype()) + " on " + dst.device().str() +
                            " (replaced through mutable_grad()?); it must match the leaf");
      }
      dst.add_(g);
    }
    for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

std::string shapes_of(const TensorList& ts) {
  std::ostringstream os;
  for (size_t i = 0; i < ts.size(); ++i) {
    os << (i ? ", " : "");
    if (ts[i].defined()) {
      os << shape_str(ts[i].sizes()) << ' ' << dtype_name(ts[i].dtype());
    } else {
      os << "None";
    }
  }
  return os.str();
}

// The max of all elements propagates NaN: one pass and a 0-d result, where isnan then any would
// write a bool tensor of t's size first.
bool has_nan(const Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return false;
  NoGradGuard no_grad;
  return std::isnan(max(t).item<double>());
}

}  // namespace

Node::Node() : sequence_nr_(g_sequence_nr.fetch_add(1)) {}

// A graph is a chain of shared_ptrs: letting each node's destructor free the next one would recurse
// once per node, and a long graph (an RNN unrolled over 100,000 steps) would overflow the stack.
// Instead the dying node takes over the edges of every node it is the last owner of and frees them
// in a loop, so destruction runs in constant stack depth whatever the graph's length.
Node::~Node() {
  if (next_edges_.empty()) return;
  std::vector<std::shared_ptr<Node>> pending;
  auto take_edges = [&pending](std::vector<Edge>& edges) {
    for (Edge& e : edges)
      if (e.fn) pending.push_back(std::move(e.fn));
    edges.clear();
  };
  take_edges(next_edges_);
  while (!pending.empty()) {
    std::shared_ptr<Node> fn = std::move(pending.back());
    pending.pop_back();
    // Only the last owner may empty a node's edges: others still use them. A count of one cannot
    // grow behind our back, since the only other handles are weak ones held for leaves, which have
    // no edges to take.
    if (fn.use_count() == 1) take_edges(fn->next_edges_);
  }  // each `fn` dies here with no edges left, so its own destructor returns at once
}

// --- SavedTensor -----------------------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t, const char* op) : op_(op) {
  if (t.defined()) {
    tensor_ = t.detach();
    version_ = t.version();
    saved_ = true;
  }
}

Tensor SavedTensor::unpack() const {
  if (released_) {
    throw AutogradError(std::string(op_) +
                        ": trying to backward through the graph a second time (its saved tensors were freed "
                        "after the first backward); pass retain_graph=true to the first backward");
  }
  if (saved_ && tensor_.version() != version_) {
    throw AutogradError(std::string(op_) + ": a tensor saved for backward (shape " + shape_str(tensor_.sizes()) +
                        ") was modified by an in-place operation: it is at version " +
                        std::to_string(tensor_.version()) + ", backward needs version " + std::to_string(version_));
  }
  return tensor_;
}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  if (released_) {
    for (const auto& s : saved) s.unpack();  // throws the "second time" error
  }
  Context ctx{grad_outputs, saved, needs_input_grad};
  TensorList out = fn_(ctx);
  if (out.size() != next_edges_.size()) {
    throw AutogradError(name_ + ": backward returned " + std::to_string(out.size()) + " gradients for " +
                        std::to_string(next_edges_.size()) + " inputs");
  }
  return out;
}

void FunctionNode::release_saved() {
  for (auto& s : saved) s.release();
  released_ = true;
}

// --- recording -------------------------------------------------------------------------------

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  detail::refresh_view_history(t.impl_ptr());
  if (!t.impl()->autograd) return {};
  AutogradMeta& meta = *t.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  if (!meta.requires_grad) return {};
  const std::lock_guard<std::recursive_mutex> lock(meta.mutex);  // one accumulator, whichever thread asks
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr) {
  AutogradMeta& meta = t.impl()->autograd_meta();
  meta.grad_fn = fn;
  meta.output_nr = output_nr;
  meta.requires_grad = true;
  if (meta.retains_grad && fn) attach_retain_hook(t.impl_ptr(), *fn, output_nr);  // an in-place op's new history
}

// --- views of a base changed in place ------------------------------------------------------------

namespace {

// Whether no two positions of a layout are one element: with its dims of more than one element in
// order of stride, each stride reaches past all that the dims before it span.
bool non_overlapping(const Shape& sizes, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1) dims.emplace_back(strides[d], sizes[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;
  for (const auto& [stride, size] : dims) {
    if (stride <= span) return false;
    span += (size - 1) * stride;  // within the view's extent, checked when it was made
  }
  return true;
}

// Where a view's elements sit in its base's memory: both layouts, offsets relative to the base's
// first element. The two backward nodes below work in a buffer laid out as that memory (the base's
// extent), reading and writing the base and the view through their strides.
struct ViewLayout {
  ViewLayout(const TensorImpl& base, const TensorImpl& view)
      : base_sizes(base.sizes),
        base_strides(base.strides),
        view_sizes(view.sizes),
        view_strides(view.strides),
        offset(view.offset - base.offset) {}
  int64_t extent() const { return checked_extent(base_sizes, base_strides, "view backward"); }
  // Zeros of `like`'s dtype and device, as many as the base's memory spans.
  Tensor memory(const Tensor& like) const { return zeros({extent()}, TensorOptions(like.dtype(), like.device())); }
  Tensor base_in(const Tensor& memory) const { return memory.as_strided(base_sizes, base_strides, 0); }
  Tensor view_in(const Tensor& memory, const Shape& sizes) const {
    return memory.as_strided(sizes, view_strides, offset);
  }
  Shape base_sizes, base_strides, view_sizes, view_strides;
  int64_t offset;
};

// The history a view gets when its base changed in place: the view's gradient, put where the view's
// elements sit in the base, in zeros of the base's shape: written into the memory buffer through the
// view's strides, read back through the base's. Positions that alias one element (an expand's
// stride-0 dims) sum their gradients first; a view that overlaps itself otherwise (an as_strided
// of a tensor that did not require grad then) goes through scatter_add, its elements numbered by
// where they sit.
class ViewOfBaseBackward final : public Node {
 public:
  ViewOfBaseBackward(const TensorImpl& base, const TensorImpl& view, Edge base_edge) : layout_(base, view) {
    next_edges_.push_back(std::move(base_edge));
    output_meta_.push_back(OutputMeta{view.sizes, view.dtype, view.storage->device()});
  }
  std::string name() const override { return "ViewOfBaseBackward"; }
  TensorList apply(TensorList&& grads) override {
    NoGradGuard no_grad;
    Tensor g = grads[0];
    Shape sizes = layout_.view_sizes;
    Shape aliased;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (layout_.view_strides[d] == 0 && sizes[d] > 1) {
        aliased.push_back(static_cast<int64_t>(d));
        sizes[d] = 1;
      }
    }
    if (!aliased.empty()) g = sum(g, aliased, /*keepdim=*/true);
    if (non_overlapping(sizes, layout_.view_strides)) {
      Tensor memory = layout_.memory(g);
      if (g.numel() > 0) layout_.view_in(memory, sizes).copy_(g);
      return {layout_.base_in(memory)};
    }
    const int64_t n = shape_numel(layout_.base_sizes);
    Tensor flat = zeros({n}, TensorOptions(g.dtype(), g.device()));
    if (n > 0 && g.numel() > 0) {
      // The base's flat indices laid out as its memory, -1 in the gaps of a base that is not dense
      // (a view element there would be an IndexError), read through the view's strides.
      const TensorOptions index_options(DType::Int64, g.device());
      Tensor where = full({layout_.extent()}, -1, index_options);
      layout_.base_in(where).copy_(arange(0, n, 1, index_options).view(layout_.base_sizes));
      flat = scatter_add(flat, 0, layout_.view_in(where, sizes).reshape({-1}), g.reshape({-1}));
    }
    return {flat.view(layout_.base_sizes)};
  }

 private:
  ViewLayout layout_;
};

// The history a base gets when one of its views is changed in place (PyTorch's CopySlices). Where
// the view is not, the base's gradient passes through to its old history; where it is, the in-place
// op's own backward (`op`, recorded on the view) turns the gradient of the view's new values into
// that of its old ones, which go to the base's old history too, and gives the op's other inputs
// theirs.
class ViewInPlaceBackward final : public Node {
 public:
  ViewInPlaceBackward(const TensorImpl& base, const TensorImpl& view, Edge base_edge, std::shared_ptr<Node> op)
      : op_(std::move(op)), layout_(base, view) {
    next_edges_.push_back(std::move(base_edge));
    for (size_t i = 1; i < op_->next_edges().size(); ++i) next_edges_.push_back(op_->next_edges()[i]);
    output_meta_.push_back(OutputMeta{base.sizes, base.dtype, base.storage->device()});
  }
  std::string name() const override { return op_->name() + " on a view"; }
  TensorList apply(TensorList&& grads) override {
    NoGradGuard no_grad;
    const Tensor& g = grads[0];
    Tensor memory = layout_.memory(g);
    Tensor base = layout_.base_in(memory);
    base.copy_(g);
    Tensor view = layout_.view_in(memory, layout_.view_sizes);
    TensorList out = op_->apply(TensorList{view.clone()});
    if (out[0].defined()) {
      view.copy_(out[0]);
    } else {
      view.zero_();
    }
    out[0] = base;
    return out;
  }
  void release_saved() override { op_->release_saved(); }

 private:
  std::shared_ptr<Node> op_;
  ViewLayout layout_;
};

std::mutex g_view_mutex;  // regenerations: rare (after an in-place op on a base), so one lock for all

const Node* history_of(const TensorImpl& t) { return t.autograd ? t.autograd->grad_fn.get() : nullptr; }

// After an in-place op recorded as `op` on `view`: its base's new history (ViewInPlaceBackward).
// The view and the base's other views take theirs from it on their next use.
void rebase_history(const Tensor& view, const std::shared_ptr<Node>& op) {
  Tensor base(view.impl()->view_base);
  auto node = std::make_shared<ViewInPlaceBackward>(*base.impl(), *view.impl(), gradient_edge(base), op);
  node->forward_context = op->forward_context;
  set_history(base, node, 0);
}

}  // namespace

namespace detail {

void remember_view_base(TensorImpl& view, const Tensor& of) {
  const TensorImpl& src = *of.impl();
  std::shared_ptr<TensorImpl> base = src.view_base ? src.view_base : (src.is_view ? nullptr : of.impl_ptr());
  if (!base) return;
  if (base->autograd) view.view_base_fn = base->autograd->grad_fn;
  view.view_base_seen.store(view.view_base_fn.get(), std::memory_order_release);
  view.view_base = std::move(base);
}

void refresh_view_history(const std::shared_ptr<TensorImpl>& impl) {
  TensorImpl& view = *impl;
  if (!view.view_base) return;
  if (history_of(*view.view_base) == view.view_base_seen.load(std::memory_order_acquire)) return;
  const std::lock_guard<std::mutex> lock(g_view_mutex);
  const TensorImpl& base = *view.view_base;
  static const std::shared_ptr<Node> kNone;
  const std::shared_ptr<Node>& fn = base.autograd ? base.autograd->grad_fn : kNone;
  if (fn.get() == view.view_base_seen.load(std::memory_order_relaxed)) return;
  // Gone (detach_() on the base, which leaves its views' histories as they were), the base holds
  // other memory now (set_data on a leaf), or the view was made a leaf that requires grad of its
  // own (set_requires_grad: its gradient is its .grad): the view's history stands.
  const bool own_leaf = view.autograd && view.autograd->requires_grad && !view.autograd->grad_fn;
  if (fn && base.storage == view.storage && !own_leaf) {
    auto node = std::make_shared<ViewOfBaseBackward>(base, view, Edge{fn, base.autograd->output_nr});
    node->forward_context = "a view of shape " + shape_str(view.sizes) + " whose base changed in place";
    if (view.autograd && view.autograd->grad_fn) {  // hooks on the view's gradient move along
      for (auto& [nr, hook] : view.autograd->grad_fn->pre_hooks()) {
        if (nr == view.autograd->output_nr) node->pre_hooks().emplace_back(0, hook);
      }
    }
    set_history(Tensor(impl), node, 0);  // moves a retain_grad hook too
  }
  view.view_base_fn = fn;
  view.view_base_seen.store(fn.get(), std::memory_order_release);
}

}  // namespace detail

std::shared_ptr<FunctionNode> record_function(const char* name, const TensorList& inputs, const TensorList& outputs,
                                              const TensorList& saved, FunctionNode::BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  auto& edges = node->next_edges();
  edges.reserve(inputs.size());
  node->needs_input_grad.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Edge e = (in.defined() && in.requires_grad()) ? gradient_edge(in) : Edge{};
    node->needs_input_grad.push_back(e.valid());
    edges.push_back(std::move(e));
  }
  node->saved.reserve(saved.size());
  for (const Tensor& s : saved) node->saved.emplace_back(s, name);
  if (anomaly_mode_enabled()) node->forward_context = shapes_of(inputs);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& out = outputs[k];
    node->output_meta().push_back(OutputMeta{out.sizes(), out.dtype(), out.device()});
    set_history(out, node, static_cast<uint32_t>(k));
  }
  // An in-place op (its output is one of its inputs) on a view: the base's history changes with it.
  for (const Tensor& out : outputs) {
    if (!out.impl()->view_base) continue;
    for (const Tensor& in : inputs) {
      if (in.is_same(out)) {
        rebase_history(out, node);
        break;
      }
    }
  }
  return node;
}

// --- the engine ------------------------------------------------------------------------------

namespace {

struct CaptureTarget {
  Node* node;
  uint32_t nr;
  size_t slot;
};

struct ReadyCmp {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// For autograd::grad: the nodes of the graph below `roots` from which a capture target can be reached
// by at least one edge (a target itself is in it only when another target lies below it). Only these
// run; a target outside it is captured and goes no further. Iterative: graphs can be very deep.
std::unordered_set<Node*> leading_to_targets(const std::vector<Edge>& roots,
                                             const std::vector<CaptureTarget>& captures) {
  std::unordered_set<Node*> targets, leading, finished;
  for (const CaptureTarget& c : captures) targets.insert(c.node);
  std::vector<std::pair<Node*, size_t>> path;  // a node and the index of its next edge to visit
  for (const Edge& r : roots) {
    if (!r.valid() || !finished.insert(r.fn.get()).second) continue;
    path.emplace_back(r.fn.get(), 0);
    while (!path.empty()) {
      auto& [n, next] = path.back();
      const std::vector<Edge>& edges = n->next_edges();
      if (next < edges.size()) {
        Node* child = edges[next++].fn.get();
        if (child && finished.insert(child).second) path.emplace_back(child, 0);
        continue;
      }
      for (const Edge& e : edges) {
        if (e.valid() && (targets.count(e.fn.get()) || leading.count(e.fn.get()))) {
          leading.insert(n);
          break;
        }
      }
      path.pop_back();
    }
  }
  return leading;
}

// Runs the graph below `roots`. With `captures`, gradients reaching those (node, output) pairs are
// stored into `captured`, leaves are left untouched and only the nodes that lead to a target run
// (autograd::grad); `leaf_hooks` says whether a captured leaf's hooks run first.
void execute(const std::vector<Edge>& roots, TensorList seeds, bool retain_graph,
             const std::vector<CaptureTarget>* captures, TensorList* captured, bool leaf_hooks = true) {
  // Backward runs in the dtypes forward chose: the casts autocast made are on the tape, and a
  // backward started inside an autocast region must not cast its gradients again.
  const AutocastSnapshotGuard autocast_off(AutocastSnapshot{});
  // Dependencies: how many edges point at each node from the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> alive;
  std::vector<Node*> stack;
  for (const Edge& r : roots) {
    if (alive.emplace(r.fn.get(), r.fn).second) stack.push_back(r.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (alive.emplace(e.fn.get(), e.fn).second) stack.push_back(e.fn.get());
    }
  }

  const std::unordered_set<Node*> leading =
      captures ? leading_to_targets(roots, *captures) : std::unordered_set<Node*>();

  std::unordered_map<Node*, TensorList> buffers;
  auto add_to_buffer = [&](Node* n, uint32_t nr, Tensor g) {
    TensorList& buf = buffers[n];
    if (buf.empty()) buf.resize(n->output_meta().size());
    const OutputMeta& meta = n->output_meta()[nr];
    if (g.sizes() != meta.sizes) {
      throw AutogradError("autograd: a gradient of shape " + shape_str(g.sizes()) + " arrived for an output of " +
                          n->name() + " of shape " + shape_str(meta.sizes));
    }
    if (g.dtype() != meta.dtype) g = g.to(meta.dtype);
    Tensor& slot = buf[nr];
    slot = slot.defined() ? add(slot, g) : g;
  };
  for (size_t i = 0; i < roots.size(); ++i) add_to_buffer(roots[i].fn.get(), roots[i].input_nr, seeds[i]);

  std::priority_queue<Node*, std::vector<Node*>, ReadyCmp> ready;
  std::unordered_set<Node*> queued;
  for (const Edge& r : roots) {
    Node* n = r.fn.get();
    if (deps[n] == 0 && queued.insert(n).second) ready.push(n);
  }

  std::vector<Node*> executed;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    bool is_target = false;
    if (captures) {
      for (const CaptureTarget& c : *captures) is_target = is_target || c.node == n;
      if (!is_target && !leading.count(n)) continue;  // below every input: not run, its saved tensors kept
    }
    TensorList grads = std::move(buffers[n]);
    buffers.erase(n);
    grads.resize(n->output_meta().size());
    for (auto& [nr, hook] : n->pre_hooks()) {
      if (nr < grads.size() && grads[nr].defined()) grads[nr] = hook_result(grads[nr], hook(grads[nr]), "a tensor");
    }
    bool skip = false;
    if (captures) {
      // A leaf's gradient is captured instead of accumulated, after its hooks, as backward would
      // accumulate it (PyTorch's autograd.grad runs them too). A target with no other below it
      // stops here.
      auto* leaf = dynamic_cast<AccumulateGrad*>(n);
      skip = leaf != nullptr || !leading.count(n);
      if (leaf && leaf_hooks && is_target && grads[0].defined()) grads[0] = leaf->run_hooks(std::move(grads[0]));
      for (const CaptureTarget& c : *captures) {
        if (c.node == n && grads[c.nr].defined()) {
          Tensor& slot = (*captured)[c.slot];
          slot = slot.defined() ? add(slot, grads[c.nr]) : grads[c.nr];
        }
      }
    }
    bool any_grad = false;
    for (const Tensor& g : grads) any_grad = any_grad || g.defined();
    TensorList outs;
    if (!skip && any_grad) {
      for (size_t k = 0; k < grads.size(); ++k) {
        if (!grads[k].defined()) {
          const OutputMeta& m = n->output_meta()[k];
          grads[k] = zeros(m.sizes, TensorOptions(m.dtype, m.device));
        }
      }
      outs = n->apply(std::move(grads));
      executed.push_back(n);
      if (anomaly_mode_enabled()) {
        for (size_t k = 0; k < outs.size(); ++k) {
          if (outs[k].defined() && has_nan(outs[k])) {
            throw AutogradError("anomaly: the backward of " + n->name() + " (forward inputs: " + n->forward_context +
                                ") produced NaN in the gradient of its input " + std::to_string(k));
          }
        }
      }
    }
    const auto& edges = n->next_edges();
    for (size_t k = 0; k < edges.size(); ++k) {
      const Edge& e = edges[k];
      if (!e.valid()) continue;
      if (k < outs.size() && outs[k].defined()) add_to_buffer(e.fn.get(), e.input_nr, std::move(outs[k]));
      if (--deps[e.fn.get()] == 0 && queued.insert(e.fn.get()).second) ready.push(e.fn.get());
    }
  }
  if (!retain_graph) {
    for (Node* n : executed) n->release_saved();
  }
}

// Seeds for roots: ones for one-element roots when not given.
TensorList make_seeds(const TensorList& roots, const TensorList& grad_roots, std::vector<Edge>& edges) {
  if (!grad_roots.empty() && grad_roots.size() != roots.size()) {
    throw AutogradError("backward: got " + std::to_string(grad_roots.size()) + " gradients for " +
                        std::to_string(roots.size()) + " tensors");
  }
  TensorList seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) throw AutogradError("backward: tensor " + std::to_string(i) + " is undefined");
    Edge e = gradient_edge(r);
    if (!e.valid()) {
      throw AutogradError("backward: tensor " + std::to_string(i) + " (shape " + shape_str(r.sizes()) +
                          ") does not require grad and has no grad_fn");
    }
    Tensor g = grad_roots.empty() ? Tensor() : grad_roots[i];
    if (!g.defined()) {
      if (r.numel() != 1) {
        throw AutogradError("backward: a gradient can be implied only for one-element tensors, got shape " +
                            shape_str(r.sizes()) + "; pass the gradient explicitly");
      }
      g = ones_like(r);
    } else if (g.sizes() != r.sizes()) {
      throw ShapeError("backward: gradient of shape " + shape_str(g.sizes()) + " for a tensor of shape " +
                       shape_str(r.sizes()));
    }
    edges.push_back(std::move(e));
    seeds.push_back(g.detach());
  }
  return seeds;
}

struct CallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* prev;
  std::vector<std::function<void()>>* prev_outer;
  CallbackScope() : prev(t_callbacks), prev_outer(t_outer_callbacks) {
    t_callbacks = &callbacks;
    if (!t_outer_callbacks) t_outer_callbacks = &callbacks;  // not nested in another pass
  }
  ~CallbackScope() {
    t_callbacks = prev;
    t_outer_callbacks = prev_outer;
  }
  void run() {
    // Callbacks may queue further callbacks; run until none are left.
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();
  }
};

}  // namespace

void run_backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph) {
  std::vector<Edge> edges;
  TensorList seeds = make_seeds(roots, grad_roots, edges);
  NoGradGuard no_grad;
  CallbackScope scope;
  execute(edges, std::move(seeds), retain_graph, nullptr, nullptr);
  scope.run();
}

namespace {

TensorList grad_impl(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                     bool retain_graph, bool allow_unused, bool leaf_hooks) {
  std::vector<Edge> edges;
  TensorList seeds = make_seeds(outputs, grad_outputs, edges);
  std::vector<CaptureTarget> targets;
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge e = gradient_edge(inputs[i]);
    if (!e.valid()) {
      throw AutogradError("grad: input " + std::to_string(i) + " does not require grad");
    }
    targets.push_back(CaptureTarget{e.fn.get(), e.input_nr, i});
    keep.push_back(e.fn);
  }
  TensorList captured(inputs.size());
  NoGradGuard no_grad;
  CallbackScope scope;
  execute(edges, std::move(seeds), retain_graph, &targets, &captured, leaf_hooks);
  scope.run();
  for (size_t i = 0; i < captured.size(); ++i) {
    if (!captured[i].defined() && !allow_unused) {
      throw AutogradError("grad: input " + std::to_string(i) +
                          " was not used in the graph of the outputs; pass allow_unused=true to get an undefined "
                          "gradient");
    }
  }
  return captured;
}

}  // namespace

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, bool retain_graph,
                bool allow_unused) {
  return grad_impl(outputs, inputs, grad_outputs, retain_graph, allow_unused, /*leaf_hooks=*/true);
}

TensorList detail::grad_without_leaf_hooks(const TensorList& outputs, const TensorList& inputs,
                                           const TensorList& grad_outputs, bool retain_graph, bool allow_unused) {
  return grad_impl(outputs, inputs, grad_outputs, retain_graph, allow_unused, /*leaf_hooks=*/false);
}

void queue_backward_callback(std::function<void()> callback) {
  if (!t_callbacks) throw AutogradError("queue_backward_callback: no backward pass is running on this thread");
  t_callbacks->push_back(std::move(callback));
}

void queue_outer_backward_callback(std::function<void()> callback) {
  if (!t_outer_callbacks) {
    throw AutogradError("queue_outer_backward_callback: no backward pass is running on this thread");
  }
  t_outer_callbacks->push_back(std::move(callback));
}

bool anomaly_mode_enabled() { return g_anomaly.load(); }
void set_anomaly_mode(bool enabled) { g_anomaly.store(enabled); }

// --- Tensor's autograd methods ----------------------------------------------------------------

bool Tensor::requires_grad() const {
  check_defined("requires_grad");
  detail::refresh_view_history(impl_);
  const auto& m = impl_->autograd;
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::set_requires_grad(bool rg) {
  check_defined("set_requires_grad");
  if (impl_->autograd && impl_->autograd->grad_fn) {
    throw AutogradError("set_requires_grad: only leaf tensors can change requires_grad; use detach() first");
  }
  if (rg && !is_floating(dtype())) {
    throw DTypeError(std::string("set_requires_grad: only floating point tensors can require gradients, got ") +
                     dtype_name(dtype()));
  }
  if (rg || impl_->autograd) impl_->autograd_meta().requires_grad = rg;
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor kUndefined;
  check_defined("grad");
  return impl_->autograd ? impl_->autograd->grad : kUndefined;
}

Tensor& Tensor::mutable_grad() {
  check_defined("mutable_grad");
  return impl_->autograd_meta().grad;
}

void Tensor::set_grad(const Tensor& g) {
  check_defined("set_grad");
  if (g.defined() && (g.sizes() != sizes() || g.dtype() != dtype() || g.device() != device())) {
    throw ShapeError("set_grad: gradient " + shape_str(g.sizes()) + " " + dtype_name(g.dtype()) + " on " +
                     g.device().str() + " does not match tensor " + shape_str(sizes()) + " " + dtype_name(dtype()) +
                     " on " + device().str());
  }
  impl_->autograd_meta().grad = g;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  check_defined("grad_fn");
  detail::refresh_view_history(impl_);
  return impl_->autograd ? impl_->autograd->grad_fn : kNone;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

uint32_t Tensor::output_nr() const {
  check_defined("output_nr");
  detail::refresh_view_history(impl_);
  return impl_->autograd ? impl_->autograd->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward({*this}, {gradient}, retain_graph);
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  if (!requires_grad()) throw AutogradError("register_hook: the tensor does not require grad");
  if (is_leaf()) {
    impl_->autograd_meta().leaf_hooks.push_back(std::move(hook));
  } else {
    grad_fn()->pre_hooks().emplace_back(output_nr(), std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const {
  if (!requires_grad() || !is_leaf()) {
    throw AutogradError("register_post_accumulate_grad_hook: only leaf tensors that require grad have one");
  }
  impl_->autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  if (!requires_grad()) throw AutogradError("retain_grad: the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep .grad anyway
  AutogradMeta& meta = impl_->autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  attach_retain_hook(impl_, *grad_fn(), output_nr());
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->sizes = impl_->sizes;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->version = impl_->version;
  impl->is_view = true;
  return Tensor(std::move(impl));
}

void Tensor::set_data(const Tensor& data) {
  check_defined("set_data");
  if (!data.defined()) throw Error("set_data: the new data is an undefined tensor");
  if (!is_leaf()) throw AutogradError("set_data: only leaf tensors can take new data");
  if (requires_grad() && !is_floating(data.dtype())) {
    throw DTypeError(std::string("set_data: a tensor that requires grad cannot hold ") + dtype_name(data.dtype()) +
                     " data");
  }
  impl_->storage = data.impl()->storage;
  impl_->dtype = data.impl()->dtype;
  impl_->sizes = data.impl()->sizes;
  impl_->strides = data.impl()->strides;
  impl_->offset = data.impl()->offset;
  impl_->is_view = data.impl()->is_view;
  impl_->no_grad_view_of_grad = false;
  impl_->view_base.reset();  // another tensor's memory now
  // The tensor keeps its own version counter, advanced: what was saved or cast from its old values
  // (a graph's saved tensors, an autocast cast) is stale now. (Taking data's counter would mark
  // data's own saved copies stale instead.) As PyTorch, a new gradient sink for the new dtype and
  // shape: one an older graph still holds would round gradients to the old dtype.
  bump_version();
  if (impl_->autograd) {
    impl_->autograd->grad = Tensor();
    impl_->autograd->grad_accumulator.reset();
  }
}

Tensor& Tensor::detach_() {
  check_defined("detach_");
  impl_->view_base.reset();  // no history to regenerate from now
  if (impl_->autograd) {
    impl_->autograd->grad_fn.reset();
    impl_->autograd->output_nr = 0;
    impl_->autograd->requires_grad = false;
  }
  return *this;
}

// --- debugging ----------------------------------------------------------------------------------

int64_t saved_tensor_bytes(const Tensor& root) {
  if (!root.defined()) throw AutogradError("saved_tensor_bytes: the tensor is undefined");
  std::unordered_set<Node*> seen;
  std::unordered_set<const Storage*> storages;
  std::vector<Node*> stack;
  int64_t bytes = 0;
  if (Node* fn = root.grad_fn().get()) {
    stack.push_back(fn);
    seen.insert(fn);
  }
  // Iterative, as every walk over a graph here: a long graph must not recurse once per node.
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (const auto* f = dynamic_cast<const FunctionNode*>(n)) {
      for (const SavedTensor& s : f->saved) {
        if (!s.defined()) continue;
        Tensor t;
        try {
          t = s.unpack();
        } catch (const AutogradError&) {
          continue;  // released by a backward, or stale: see the header
        }
        const Storage* storage = t.defined() ? t.storage().get() : nullptr;
        if (storage && storages.insert(storage).second) bytes += static_cast<int64_t>(storage->nbytes());
      }
    }
    for (const Edge& e : n->next_edges()) {
      if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  return bytes;
}

}  // namespace kiln
