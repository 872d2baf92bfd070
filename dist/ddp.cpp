// DistributedDataParallel (see ddp.h). When a bucket is reduced is detail::BucketSchedule's (shared
// with ZeRO): strictly in one order on every rank; what reducing it means is this file's.
#include "dist/ddp.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/ops/factory.h"
#include "dist/buckets.h"
#include "dist/flat.h"
#include "dist/same_model.h"
#include "kernels/error.h"

namespace kiln::dist {

struct DistributedDataParallel::State {
  ProcessGroup* group = nullptr;
  DDPOptions options;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<Tensor> buffers;  // DDPOptions::broadcast_buffers: rank 0's after each reducing backward
  std::vector<std::vector<size_t>> buckets;
  std::vector<Tensor> flats;  // per bucket, kept from step to step
  std::vector<Tensor> views;  // per parameter, with gradient_as_bucket_view: its gradient's place in the flat
  std::vector<std::shared_ptr<Work>> works;  // per bucket: its all-reduce in flight this pass
  detail::BucketSchedule schedule;           // gradient k is parameter k's
  // This backward pass:
  bool sync = true;          // false inside no_sync
  bool in_pass = false;      // the end-of-backward callback is queued
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

  // The dtype bucket b's gradients travel in: DDPOptions::comm_dtype, or their own.
  DType wire_dtype(size_t b) const { return options.comm_dtype.value_or(params[buckets[b].front()].dtype()); }

  // Starts bucket b's all-reduce: its gradients are packed into its flat buffer (made on first use,
  // then kept, in the wire dtype: packing converts; or, as views, already there) and one
  // all-reduce (an average: detail::averaging_op) is issued over it; finish() waits for it and
  // unpacks.
  void reduce(size_t b) {
    Tensor& flat = flats[b];
    if (!flat.defined()) {
      const Tensor& first = params[buckets[b].front()];
      flat = empty({detail::total_numel(bucket_params(b))}, TensorOptions(wire_dtype(b), first.device()));
    }
    if (views.empty()) {
      detail::pack(bucket_params(b), flat, /*grads=*/true);
    } else {
      for (size_t i : buckets[b]) bind(i);
    }
    works[b] = group->all_reduce(flat, detail::averaging_op(flat, group->size()), options.algo);
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

  void begin_pass() {
    // Nothing is in flight here (end_pass and abort_pass wait for every bucket); should anything
    // be, its result is stale, and this pass's gradients are already accumulating.
    finish(/*unpack=*/false);
    in_pass = true;
    schedule.reset();
    reductions = 0;
  }

  // Parameter k's gradient has been accumulated (its post-accumulate hook).
  void on_gradient(size_t k, const std::weak_ptr<State>& self) {
    if (!sync) {  // inside no_sync: this pass reduces nothing
      reductions = 0;
      return;
    }
    if (!in_pass) {
      begin_pass();
      detail::queue_end_of_pass(self);
    }
    if (!schedule.arrive(k)) {  // accumulated twice in one pass: its bucket packs the sum, unless issued
      if (schedule.issued(k)) {
        throw Error("DistributedDataParallel: " + detail::second_gradient("parameter '" + names[k] + "'"));
      }
      return;
    }
    if (!views.empty()) bind(k);  // a new gradient into its bucket now, and freed
    schedule.issue_ready([this](size_t b) { reduce(b); });
  }

  // Backward failed: the next backward starts a pass of its own. The all-reduces issued are waited
  // for here (their results are not this step's), so none is left writing a buffer.
  void abort_pass() {
    in_pass = false;
    finish(/*unpack=*/false);
  }

  void end_pass() {
    in_pass = false;
    if (const std::optional<size_t> i = schedule.first_missing(); i && !options.find_unused_parameters) {
      finish(/*unpack=*/false);  // nothing left writing a bucket (or, as views, the gradients) after the error
      throw Error("DistributedDataParallel: parameter '" + names[*i] +
                  "' got no gradient in this backward pass, so its bucket cannot be reduced; use every "
                  "parameter in the loss, or set DDPOptions::find_unused_parameters");
    }
    // Backward is done: what is left is communication (the caller's end of its backward phase ends it).
    if (profiler) profiler->begin(profile::Phase::Communication);
    // find_unused_parameters: which parameters hold a gradient on any rank, read before the buckets
    // left give the missing ones theirs (zeros; as views, the view).
    // 1 for each parameter that holds a gradient on this rank (from this backward, or accumulated
    // under no_sync or kept by zero_grad(false)), else 0.
    std::vector<float> local;
    if (options.find_unused_parameters) {
      for (const Tensor& p : params) local.push_back(p.grad().defined() ? 1.0f : 0.0f);
    }
    schedule.issue_rest([this](size_t b) { reduce(b); });  // a missing gradient counts as zero
    // After every bucket: the ranks issue their buckets in one order, whichever were complete early.
    Tensor used;
    std::shared_ptr<Work> used_work;
    if (!local.empty()) {
      used = tensor(local).to(params.front().device());
      used_work = group->all_reduce(used, ReduceOp::Max);
    }
    finish();
    sync_buffers();
    if (used_work) {
      used_work->wait();
      // A parameter with a gradient here has one everywhere: only a rank missing some reads the flags.
      if (std::find(local.begin(), local.end(), 0.0f) != local.end()) forget_unused(used);
    }
    schedule.learn_order(*group);
  }

  // Rank 0's buffers on every rank (the running statistics its forward passes updated).
  void sync_buffers() {
    NoGradGuard no_grad;
    for (const Tensor& b : buffers) detail::broadcast_from_rank0(*group, b);
  }

  // A parameter no rank has a gradient for keeps none, as in one process over the whole batch (and
  // as PyTorch's DDP leaves a globally unused parameter's gradient alone): an optimizer then skips
  // it, where a zero gradient would still move it by weight decay or momentum. `used` holds the
  // ranks' flags, combined.
  void forget_unused(const Tensor& used) {
    const Tensor flags = used.to(Device::cpu());  // on a GPU, waits for the flags' all-reduce
    const float* any = flags.data_ptr<float>();
    for (size_t i = 0; i < params.size(); ++i) {
      if (any[i] == 0.0f) {
        Tensor p = params[i];  // a handle: set_grad reaches the parameter
        p.set_grad(Tensor());
      }
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
  std::vector<std::pair<std::string, Tensor>> everything = module_->named_parameters();
  const std::vector<std::pair<std::string, Tensor>> buffers = module_->named_buffers();
  everything.insert(everything.end(), buffers.begin(), buffers.end());
  detail::check_same_tensors(group_, "DistributedDataParallel", everything);  // before any rank can throw alone
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    st.names.push_back(name);
    st.params.push_back(p);
  }
  if (st.params.empty()) {
    throw Error(
        "DistributedDataParallel: the module has no parameter that requires grad, so there is nothing to "
        "reduce (PyTorch's DDP refuses such a module too)");
  }
  if (options_.broadcast_buffers) {
    for (const auto& [name, b] : buffers) {
      if (b.defined() && b.numel() > 0) st.buffers.push_back(b);
    }
  }
  if (const std::optional<DType> wire = options_.comm_dtype) {
    if (!is_floating(*wire)) {
      throw DTypeError(std::string("DistributedDataParallel: comm_dtype must be a floating dtype, got ") +
                       dtype_name(*wire));
    }
    for (size_t i = 0; i < st.params.size(); ++i) {
      if (options_.gradient_as_bucket_view && st.params[i].dtype() != *wire) {
        throw DTypeError(std::string("DistributedDataParallel: gradient_as_bucket_view keeps the gradients in the "
                                     "buckets, so they must travel in their own dtype: comm_dtype is ") +
                         dtype_name(*wire) + ", parameter '" + st.names[i] + "' is " +
                         dtype_name(st.params[i].dtype()));
      }
    }
  }
  if (options_.broadcast_parameters) {
    NoGradGuard no_grad;
    for (const Tensor& p : module_->parameters()) detail::broadcast_from_rank0(group_, p);  // the frozen ones too
    for (const auto& [name, b] : buffers) {
      if (b.defined() && b.numel() > 0) detail::broadcast_from_rank0(group_, b);
    }
  }
  // Buckets in reverse registration order, each of one dtype and device, closed at bucket_bytes.
  std::vector<size_t> bucket_of(st.params.size(), 0);
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
    bucket_of[k] = st.buckets.size() - 1;
    bytes += pb;
  }
  std::vector<size_t> first_order(st.buckets.size());  // the buckets' own: reverse registration
  std::iota(first_order.begin(), first_order.end(), size_t{0});
  st.schedule = detail::BucketSchedule(std::move(bucket_of), std::move(first_order));
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
  std::weak_ptr<State> weak = state_;  // the hooks do nothing once the DDP is gone
  for (size_t k = 0; k < st.params.size(); ++k) {
    st.params[k].register_post_accumulate_grad_hook([weak, k](Tensor&) {
      if (std::shared_ptr<State> s = weak.lock()) s->on_gradient(k, weak);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

const std::vector<std::vector<size_t>>& DistributedDataParallel::buckets() const { return state_->buckets; }

int64_t DistributedDataParallel::reductions() const { return state_->reductions; }

void DistributedDataParallel::set_profiler(profile::StepProfiler* profiler) {
  state_->profiler = profiler != nullptr && profiler->enabled() ? profiler : nullptr;
}

NoSync DistributedDataParallel::no_sync() { return NoSync(std::shared_ptr<bool>(state_, &state_->sync)); }

}  // namespace kiln::dist
