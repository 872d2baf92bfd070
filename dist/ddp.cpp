// DistributedDataParallel (see ddp.h). Buckets are reduced strictly in one order: a bucket whose
// gradients are all in waits for the buckets before it. Every rank then issues the same collectives
// in the same order even when backward finishes its gradients in a different order on different
// ranks, which is what keeps ranks from pairing one bucket's all-reduce with another's. The order is
// the buckets' own (reverse registration) in the first backward, then the order in which rank 0's
// first backward completed them, broadcast at its end (detail::agree_on_order).
#include "dist/ddp.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/ops/factory.h"
#include "dist/flat.h"
#include "kernels/error.h"

namespace kiln::dist {

struct DistributedDataParallel::State {
  ProcessGroup* group = nullptr;
  DDPOptions options;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> bucket_of;
  std::vector<Tensor> flats;  // per bucket, kept from step to step
  std::vector<Tensor> views;  // per parameter, with gradient_as_bucket_view: its gradient's place in the flat
  std::vector<std::shared_ptr<Work>> works;  // per bucket: its all-reduce in flight this pass
  std::vector<size_t> order;                 // the order buckets are reduced in
  bool order_learned = false;                // order is rank 0's first backward's
  // This backward pass:
  bool sync = true;
  bool in_pass = false;      // the end-of-backward callback is queued
  std::vector<bool> ready;   // per parameter: its gradient was accumulated
  std::vector<int64_t> pending;  // per bucket: gradients still to come
  std::vector<size_t> completed;  // buckets in the order this pass completed them
  size_t next = 0;           // order[next] is the next bucket to reduce
  int64_t reductions = 0;
  profile::StepProfiler* profiler = nullptr;  // marks the waits as comm (set_profiler)

  // gradient_as_bucket_view: parameter i's gradient is its view in the flat buffer. A gradient that
  // is not (backward made a new one, or it was set by hand) is copied in; none counts as zeros.
  void bind(size_t i) {
    Tensor p = params[i];  // a handle: set_grad reaches the parameter
    Tensor view = views[i];
    const Tensor& grad = p.grad();
    if (grad.defined() && grad.data_ptr() == view.data_ptr()) return;
    NoGradGuard no_grad;
    if (grad.defined()) {
      view.copy_(grad.detach());
    } else {
      view.zero_();
    }
    p.set_grad(view);
  }

  // Starts bucket b's all-reduce: its gradients are packed into its flat buffer (made on first use,
  // then kept; or, as views, already there) and one all-reduce is issued over it; finish() waits
  // for it and unpacks.
  void reduce(size_t b) {
    Tensor& flat = flats[b];
    if (!flat.defined()) {
      const Tensor& first = params[buckets[b].front()];
      flat = empty({detail::total_numel(bucket_params(b))}, TensorOptions(first.dtype(), first.device()));
    }
    if (views.empty()) {
      detail::pack(bucket_params(b), flat, /*grads=*/true);
    } else {
      for (size_t i : buckets[b]) bind(i);
    }
    works[b] = group->all_reduce(flat, ReduceOp::Avg, options.algo);
    if (!options.overlap) {
      if (profiler) profiler->begin(profile::Phase::Communication);
      works[b]->wait();
      if (profiler && in_pass) profiler->begin(profile::Phase::Backward);  // backward goes on
    }
    ++reductions;
  }

  TensorList bucket_params(size_t b) const {
    TensorList out;
    for (size_t i : buckets[b]) out.push_back(params[i]);
    return out;
  }

  // Waits for every issued bucket and, with `unpack`, writes its averaged gradients back (views
  // have them already).
  void finish(bool unpack = true) {
    detail::wait_all(works, [&](size_t b) {
      if (unpack && views.empty()) detail::unpack(flats[b], bucket_params(b), /*grads=*/true);
    });
  }

  // Reduces the buckets, in order from order[next] on, whose gradients are all in.
  void reduce_ready() {
    while (next < order.size() && pending[order[next]] == 0) reduce(order[next++]);
  }

  void begin_pass() {
    // Nothing is in flight here (end_pass and abort_pass wait for every bucket); should anything
    // be, its result is stale, and this pass's gradients are already accumulating.
    finish(/*unpack=*/false);
    in_pass = true;
    ready.assign(params.size(), false);
    pending.resize(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) pending[b] = static_cast<int64_t>(buckets[b].size());
    completed.clear();
    next = 0;
    reductions = 0;
  }

  // Backward failed: the next backward starts a pass of its own. The all-reduces issued are waited
  // for here (their results are not this step's), so none is left writing a buffer.
  void abort_pass() {
    in_pass = false;
    finish(/*unpack=*/false);
  }

  void end_pass() {
    in_pass = false;
    if (next < buckets.size() && !options.find_unused_parameters) {
      for (size_t i = 0; i < params.size(); ++i) {
        if (!ready[i]) {
          throw Error("DistributedDataParallel: parameter '" + names[i] +
                      "' got no gradient in this backward pass, so its bucket cannot be reduced; use every "
                      "parameter in the loss, or set DDPOptions::find_unused_parameters");
        }
      }
    }
    std::fill(pending.begin(), pending.end(), 0);
    // Backward is done: what is left is communication (the caller's end of its backward phase ends it).
    if (profiler) profiler->begin(profile::Phase::Communication);
    reduce_ready();
    finish();
    if (!order_learned) {
      order = detail::agree_on_order(*group, completed, order);
      order_learned = true;
    }
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group,
                                                 DDPOptions options)
    : module_(std::move(module)), group_(group), options_(options), state_(std::make_shared<State>()) {
  if (!module_) throw Error("DistributedDataParallel: no module given");
  if (options_.bucket_bytes < 1) {
    throw Error("DistributedDataParallel: bucket_bytes must be positive, got " + std::to_string(options_.bucket_bytes));
  }
  State& st = *state_;
  st.group = &group_;
  st.options = options_;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    st.names.push_back(name);
    st.params.push_back(p);
  }
  if (options_.broadcast_parameters) {
    NoGradGuard no_grad;
    auto from_rank0 = [&](const Tensor& t) {
      Tensor d = t.detach();  // the same storage: the broadcast writes the parameter itself
      if (d.is_contiguous()) {
        group_.broadcast(d, 0)->wait();
      } else {  // a channels-last weight: through a contiguous copy
        Tensor c = d.contiguous();
        group_.broadcast(c, 0)->wait();
        d.copy_(c);
      }
    };
    for (const Tensor& p : st.params) from_rank0(p);
    for (auto& [name, b] : module_->named_buffers()) {
      if (b.defined() && b.numel() > 0) from_rank0(b);
    }
  }
  // Buckets in reverse registration order, each of one dtype and device, closed at bucket_bytes.
  st.bucket_of.assign(st.params.size(), 0);
  int64_t bytes = 0;
  for (size_t k = st.params.size(); k-- > 0;) {
    const Tensor& p = st.params[k];
    const int64_t pb = p.numel() * static_cast<int64_t>(p.element_size());
    const bool fresh = st.buckets.empty() || bytes + pb > options_.bucket_bytes ||
                       st.params[st.buckets.back().front()].dtype() != p.dtype() ||
                       st.params[st.buckets.back().front()].device() != p.device();
    if (fresh) {
      st.buckets.emplace_back();
      bytes = 0;
    }
    st.buckets.back().push_back(k);
    st.bucket_of[k] = st.buckets.size() - 1;
    bytes += pb;
  }
  st.order.resize(st.buckets.size());
  std::iota(st.order.begin(), st.order.end(), size_t{0});
  st.flats.resize(st.buckets.size());
  st.works.resize(st.buckets.size());
  if (options_.gradient_as_bucket_view) {
    // The flat buffers now, and each parameter's view: its strides (a channels-last weight's too)
    // over its numel elements of the bucket, where a dense tensor's elements fit exactly.
    st.views.resize(st.params.size());
    for (size_t b = 0; b < st.buckets.size(); ++b) {
      const Tensor& first = st.params[st.buckets[b].front()];
      st.flats[b] = zeros({detail::total_numel(st.bucket_params(b))}, TensorOptions(first.dtype(), first.device()));
      int64_t offset = 0;
      for (size_t i : st.buckets[b]) {
        const Tensor& p = st.params[i];
        st.views[i] = p.is_non_overlapping_and_dense()
                          ? st.flats[b].as_strided(p.sizes(), p.strides(), st.flats[b].storage_offset() + offset)
                          : st.flats[b].narrow(0, offset, p.numel()).view(p.sizes());
        offset += p.numel();
      }
    }
  }
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < st.params.size(); ++k) {
    st.params[k].register_post_accumulate_grad_hook([weak, k](Tensor&) {
      std::shared_ptr<State> s = weak.lock();
      if (!s) return;  // the DDP is gone
      if (!s->sync) {    // inside no_sync: this pass reduces nothing
        s->reductions = 0;
        return;
      }
      if (!s->in_pass) {
        s->begin_pass();
        detail::queue_end_of_pass(
            [weak] {
              if (std::shared_ptr<State> s2 = weak.lock()) s2->end_pass();
            },
            [weak] {
              if (std::shared_ptr<State> s2 = weak.lock()) s2->abort_pass();
            });
      }
      if (s->ready[k]) return;  // accumulated twice in one pass: counted once
      s->ready[k] = true;
      if (!s->views.empty()) s->bind(k);  // a new gradient into its bucket now, and freed
      if (--s->pending[s->bucket_of[k]] == 0) s->completed.push_back(s->bucket_of[k]);
      s->reduce_ready();
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

const std::vector<std::vector<size_t>>& DistributedDataParallel::buckets() const { return state_->buckets; }

int64_t DistributedDataParallel::reductions() const { return state_->reductions; }

void DistributedDataParallel::set_profiler(profile::StepProfiler* profiler) {
  state_->profiler = profiler != nullptr && profiler->enabled() ? profiler : nullptr;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->sync) {
  ddp_.state_->sync = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->sync = previous_; }

}  // namespace kiln::dist
