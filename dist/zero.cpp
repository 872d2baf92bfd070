// ZeroRedundancyOptimizer (see zero.h).
#include "dist/zero.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/foreach.h"
#include "dist/buckets.h"
#include "dist/flat.h"
#include "dist/same_model.h"
#include "kernels/error.h"
#include "nn/optim/clip.h"

namespace kiln::dist {

namespace {

std::string state_key(size_t index, const std::string& name) { return "state." + std::to_string(index) + "." + name; }

}  // namespace

struct ZeroRedundancyOptimizer::State {
  // Parameters [first, last) of group `group`, at `flat_offset` of the group's flat buffer, padded to
  // `numel` (a multiple of the world size); this rank's slice of it is at `shard_offset` of its shard.
  struct Bucket {
    size_t group = 0, first = 0, last = 0;
    int64_t flat_offset = 0, numel = 0, shard_offset = 0;
  };

  ProcessGroup* pg = nullptr;
  ZeroOptions options;
  std::vector<nn::optim::ParamGroup> groups;  // the groups given, each with its trainable parameters only
  // The groups as given: each one's size, and per trainable parameter its index in it (state_dict's
  // keys count every parameter, as an unsharded optimizer's do); the frozen ones, named.
  std::vector<size_t> given_sizes;
  std::vector<std::vector<size_t>> given_index;
  std::vector<std::pair<std::string, Tensor>> frozen;
  std::vector<int64_t> shard_numel;  // per group
  std::vector<Tensor> flats;         // per group: the padded flat buffer, kept from step to step (stage 1)
  std::vector<Tensor> bucket_flats;  // per bucket: its part of it (stage 1), or its own while in use (stage 2)
  std::vector<Tensor> wire_flats;    // per bucket, with comm_dtype another dtype: its reductions' buffer
  std::vector<Tensor> shards;        // per group: this rank's slices of the flat parameters (a leaf)
  std::vector<Tensor> shard_grads;   // per group: what the reduce-scatters write, the shard's .grad
  std::vector<Tensor> scratch;       // per group: a reduction that adds to shard_grads (stage 2), or arrives in
                                     // another dtype (comm_dtype), lands here first (stage 2: while it runs)
  std::vector<Bucket> buckets;       // each group's, in the group's order
  detail::BucketSchedule schedule;   // when their reduce-scatters are issued; gradient k: hooked parameter k
  std::unique_ptr<nn::optim::Optimizer> local;
  // The reduction of the gradients of the next step:
  bool sync = true;
  bool reduced = false;   // the shards' gradients are this step's (backward or clip_grad_norm_ reduced them)
  bool held = false;      // stage 2: the shards' gradients hold reductions since the last step
  bool accumulating = false;  // stage 2: this reduction adds to what the shards hold (see begin_reduction)
  bool in_pass = false;   // a backward pass is reducing: its end-of-backward callback is queued
  std::vector<std::shared_ptr<Work>> works;      // per bucket: its reduce-scatter in flight
  std::vector<std::string> hooked_names;         // per hooked parameter: "parameter i of group g" (errors)
  int64_t reductions = 0;
  profile::StepProfiler* profiler = nullptr;

  int rank() const { return pg->rank(); }
  int64_t slice(const Bucket& b) const { return b.numel / pg->size(); }
  TensorList bucket_params(const Bucket& b) const {
    const TensorList& all = groups[b.group].params;
    const auto at = [&](size_t i) { return all.begin() + static_cast<std::ptrdiff_t>(i); };
    return TensorList(at(b.first), at(b.last));
  }
  Tensor flat_of(const Bucket& b) const { return flats[b.group].narrow(0, b.flat_offset, b.numel); }

  // The dtype bucket b's gradients travel in (ZeroOptions::comm_dtype, or the parameters' own), and
  // whether it is another than the parameters' (their reductions then have buffers of their own).
  DType wire_dtype(const Bucket& b) const {
    return options.comm_dtype.value_or(groups[b.group].params[b.first].dtype());
  }
  bool converts(const Bucket& b) const { return wire_dtype(b) != groups[b.group].params[b.first].dtype(); }

  // Bucket b's flat buffer for a collective: its reduce-scatter (`for_reduction`; the padding past
  // the parameters is zeroed, as the reduce-scatter must average zeros there) or its all-gather.
  // Stage 1 keeps them from step to step, as DDP keeps its buckets' (the gathers' and, in the
  // parameters' dtype, the reductions' are one per group). Stage 2 saves that memory as well: a
  // bucket's buffer is taken from the allocator when its collective is issued and given back once
  // it is done (release_buffer), so between steps no rank holds anything of the gradient's size.
  Tensor& buffer(size_t b, bool for_reduction) {
    const Bucket& bucket = buckets[b];
    const bool wire = for_reduction && converts(bucket);
    Tensor& flat = wire ? wire_flats[b] : bucket_flats[b];
    if (!flat.defined()) {
      const Tensor& first = groups[bucket.group].params[bucket.first];
      flat = empty({bucket.numel}, TensorOptions(wire ? wire_dtype(bucket) : first.dtype(), first.device()));
      const int64_t used = detail::total_numel(bucket_params(bucket));
      if (for_reduction && used < bucket.numel) flat.narrow(0, used, bucket.numel - used).zero_();
    }
    return flat;
  }
  void release_buffer(size_t b) {
    if (!releases()) return;
    bucket_flats[b] = Tensor();
    wire_flats[b] = Tensor();
  }

  // Calls f(i, at, shard_at, n) for each piece of group g that rank r owns: elements [at, at + n) of
  // parameter i (in its row-major order) are elements [shard_at, shard_at + n) of rank r's shard.
  template <typename F> void for_each_piece(size_t g, int r, F&& f) const {
    for (const Bucket& b : buckets) {
      if (b.group != g) continue;
      const int64_t lo = r * slice(b), hi = lo + slice(b);
      int64_t offset = 0;
      for (size_t i = b.first; i < b.last; ++i) {
        const int64_t n = groups[g].params[i].numel();
        const int64_t a = std::max(offset, lo), e = std::min(offset + n, hi);
        if (a < e) f(i, a - offset, b.shard_offset + (a - lo), e - a);
        offset += n;
      }
    }
  }

  bool releases() const { return options.stage == 2; }

  // "parameter i of group g (shape ...)", i as the caller's group counts it.
  std::string name_of(size_t g, size_t j) const {
    return "parameter " + std::to_string(given_index[g][j]) + " of group " + std::to_string(g) + " (shape " +
           shape_str(groups[g].params[j].sizes()) + ")";
  }

  // The buckets hold the parameters that were trainable at construction: one frozen since would
  // still be moved by weight decay and momentum (its shard steps it with a zero gradient), one
  // unfrozen since would never be stepped. Either is refused (the same on every rank, which freeze
  // alike).
  void check_frozen_unchanged(const char* op) const {
    const std::string rebuild = "; build the ZeroRedundancyOptimizer again after freezing or unfreezing";
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t j = 0; j < groups[g].params.size(); ++j) {
        if (!groups[g].params[j].requires_grad()) {
          throw Error(std::string(op) + ": " + name_of(g, j) +
                      " was trainable when the optimizer was built and is frozen now: its shard would still "
                      "step it with a zero gradient (weight decay, momentum)" +
                      rebuild);
        }
      }
    }
    for (const auto& [name, p] : frozen) {
      if (p.requires_grad()) {
        throw Error(std::string(op) + ": " + name + " (shape " + shape_str(p.sizes()) +
                    ") was frozen when the optimizer was built and requires grad now: no shard holds it, so it "
                    "would never be stepped" +
                    rebuild);
      }
    }
  }

  // A new reduction: every bucket pending. Stage 1 reduces the gradients' whole sum every time, so
  // the reduce-scatters overwrite the shards' gradients (buffers kept from step to step: no
  // allocation per step). Stage 2 released what it reduced before, so a reduction after another in
  // the same step (gradient accumulation without no_sync) reduces only what backward added since,
  // into `scratch`, and adds that to the shards' gradients once it has arrived. Waits first for any
  // reduce-scatter left in flight by a pass that failed: its result is stale.
  void begin_reduction() {
    finish();
    reduced = false;
    accumulating = releases() && held;
    if (!accumulating) {
      for (size_t g = 0; g < groups.size(); ++g) shards[g].set_grad(shard_grads[g]);
      reductions = 0;
    }
    schedule.reset();
  }

  // Bucket b's gradients into its part of the flat buffer (the padding past them keeps its zeros;
  // packing converts to the wire dtype), and one reduce-scatter (average) from there into this
  // rank's slice of the shard's gradient (or, when accumulating or converting, of the scratch
  // buffer), averaging as DDP's does (detail::averaging_op). Stage 2 then releases the parameters'
  // gradients: the flat buffer holds them now, and after the reduce-scatter the shard holds all
  // this rank needs.
  void reduce(size_t b) {
    const Bucket& bucket = buckets[b];
    Tensor& flat = buffer(b, /*for_reduction=*/true);
    const TensorList params = bucket_params(bucket);
    detail::pack(params, flat, /*grads=*/true);
    if (releases()) {
      for (Tensor p : params) p.set_grad(Tensor());  // a handle: the parameter itself
    }
    const ReduceOp op = detail::averaging_op(flat, pg->size());
    Tensor& target = accumulating || converts(bucket) ? scratch[bucket.group] : shard_grads[bucket.group];
    if (!target.defined()) target = empty({shard_numel[bucket.group]}, TensorOptions(flat.dtype(), flat.device()));
    Tensor out = target.narrow(0, bucket.shard_offset, slice(bucket));
    works[b] = pg->reduce_scatter(out, flat, op);
    ++reductions;
  }

  // Waits for every reduce-scatter in flight.
  void finish() {
    detail::wait_all(works);
    for (size_t b = 0; b < buckets.size(); ++b) release_buffer(b);
    release_scratch();
  }

  // Stage 2 holds nothing for the reductions between them, the scratch shards included.
  void release_scratch() {
    if (!releases()) return;
    for (Tensor& t : scratch) t = Tensor();
  }

  // Issues every bucket not issued yet, in order, and waits: the shards' gradients are reduced (when
  // accumulating, each bucket's reduction is added to them as it arrives; in another dtype, it is
  // converted into them).
  void end_reduction() {
    schedule.issue_rest([this](size_t b) { reduce(b); });
    NoGradGuard no_grad;
    detail::wait_all(works, [&](size_t b) {
      release_buffer(b);
      const Bucket& bucket = buckets[b];
      if (!accumulating && !converts(bucket)) return;
      Tensor mine = shard_grads[bucket.group].narrow(0, bucket.shard_offset, slice(bucket));
      const Tensor arrived = scratch[bucket.group].narrow(0, bucket.shard_offset, slice(bucket));
      if (accumulating) {
        mine.add_(arrived);
      } else {
        mine.copy_(arrived);
      }
    });
    release_scratch();
    reduced = true;
    held = true;
  }

  // The step has used the shards' gradients, or zero_grad dropped them.
  void consumed() {
    reduced = false;
    held = false;
    reductions = 0;
  }

  // Everything at once, outside backward (overlap off, or no backward pass reduced).
  void reduce_all() {
    if (reduced) return;
    begin_reduction();
    end_reduction();
  }

  // A hooked parameter's gradient is accumulated.
  void on_gradient(size_t k, const std::weak_ptr<State>& self) {
    if (!sync) {  // inside no_sync: backward adds to the gradients, and the shards' lack what it adds
      reduced = false;
      if (!releases()) reductions = 0;  // stage 1 will reduce the whole sum again; stage 2 adds to them
      return;
    }
    if (!in_pass) {
      begin_reduction();
      in_pass = true;
      detail::queue_end_of_pass(self);
    }
    if (!schedule.arrive(k)) {  // accumulated twice in one pass: its bucket packs the sum, unless issued
      if (schedule.issued(k)) throw Error("ZeroRedundancyOptimizer: " + detail::second_gradient(hooked_names[k]));
      return;
    }
    schedule.issue_ready([this](size_t b) { reduce(b); });
  }

  // Backward failed: the next backward starts a reduction of its own; what this one issued is
  // waited for here, so nothing is left writing a buffer. (Stage 2 gave up the gradients of the
  // buckets it issued: after a failed backward, zero_grad before the next.)
  void abort_pass() {
    in_pass = false;
    finish();
  }

  void end_pass() {
    in_pass = false;
    if (profiler) profiler->begin(profile::Phase::Communication);  // backward is done: what is left waits
    end_reduction();
    schedule.learn_order(*pg);  // after the first backward: the order rank 0 completed the buckets in
  }

  // This rank's slices of the parameters into its shards: the parameters are the truth (a
  // checkpoint or load_into may have set them since the last step's all-gather).
  void refresh_shards() {
    for (size_t g = 0; g < groups.size(); ++g) {
      Tensor shard = shards[g].detach();
      for_each_piece(g, rank(), [&](size_t i, int64_t at, int64_t shard_at, int64_t n) {
        shard.narrow(0, shard_at, n).copy_(groups[g].params[i].detach().contiguous().view({-1}).narrow(0, at, n));
      });
    }
  }

  // Every bucket's slices of the shards into every rank's parameters. Stage 1 issues every bucket's
  // all-gather at once (its buffers are kept anyway); stage 2 keeps at most kGatherWindow buckets'
  // buffers alive, issuing the next bucket's once the oldest is unpacked and given back, so the
  // step's memory rises by a few buckets, not by the whole model. Every rank issues in one order.
  static constexpr size_t kGatherWindow = 2;
  void gather_parameters() {
    const size_t n = buckets.size();
    const size_t window = releases() ? kGatherWindow : n;
    std::vector<std::shared_ptr<Work>> gathers(n);
    size_t issued = 0;
    auto issue_next = [&] {
      const Bucket& bucket = buckets[issued];
      gathers[issued] = pg->all_gather(buffer(issued, /*for_reduction=*/false),
                                       shards[bucket.group].detach().narrow(0, bucket.shard_offset, slice(bucket)));
      ++issued;
    };
    while (issued < std::min(window, n)) issue_next();
    for (size_t b = 0; b < n; ++b) {
      try {
        gathers[b]->wait();
      } catch (...) {  // nothing may be left writing a buffer: wait for the rest, then report this one
        gathers[b].reset();
        try {
          detail::wait_all(gathers);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the first failure is the one reported
        }
        for (size_t i = 0; i < n; ++i) release_buffer(i);
        throw;
      }
      gathers[b].reset();
      detail::unpack(bucket_flats[b], bucket_params(buckets[b]), /*grads=*/false);
      release_buffer(b);
      if (issued < n) issue_next();
    }
  }
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<nn::optim::ParamGroup> groups, ProcessGroup& group,
                                                 Factory make, ZeroOptions options)
    : state_(std::make_shared<State>()) {
  if (!make) throw Error("ZeroRedundancyOptimizer: no optimizer factory given");
  if (options.bucket_bytes < 1) {
    throw Error("ZeroRedundancyOptimizer: bucket_bytes must be positive, got " + std::to_string(options.bucket_bytes));
  }
  if (options.comm_dtype && !is_floating(*options.comm_dtype)) {
    throw DTypeError(std::string("ZeroRedundancyOptimizer: comm_dtype must be a floating dtype, got ") +
                     dtype_name(*options.comm_dtype));
  }
  if (options.stage != 1 && options.stage != 2) {
    throw Error("ZeroRedundancyOptimizer: stage must be 1 (optimizer state sharded) or 2 (gradients too), got " +
                std::to_string(options.stage));
  }
  {  // every rank's parameters paired by position: the same model everywhere, or an Error everywhere
    std::vector<std::pair<std::string, Tensor>> all;
    std::vector<int64_t> group_of;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].params.size(); ++i) {
        all.emplace_back("parameter " + std::to_string(i) + " of group " + std::to_string(g), groups[g].params[i]);
        group_of.push_back(static_cast<int64_t>(g));
      }
    }
    detail::check_same_tensors(group, "ZeroRedundancyOptimizer", all, group_of);
  }
  nn::optim::Optimizer::check_params(groups, "ZeroRedundancyOptimizer");  // the local one sees only shards
  State& st = *state_;
  st.pg = &group;
  st.options = options;
  // Frozen parameters (requires_grad false) stay out of the shards: an unsharded optimizer skips
  // them, as they get no gradient, where a shard would step them with a zero one.
  Tensor first_trained;  // its dtype and device make the flat buffers of a group with none
  for (size_t g = 0; g < groups.size(); ++g) {
    nn::optim::ParamGroup trained = groups[g];
    trained.params.clear();
    st.given_sizes.push_back(groups[g].params.size());
    st.given_index.emplace_back();
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = groups[g].params[i];
      if (!p.requires_grad()) {
        st.frozen.emplace_back("parameter " + std::to_string(i) + " of group " + std::to_string(g), p);
        continue;
      }
      if (!first_trained.defined()) first_trained = p;
      trained.params.push_back(p);
      st.given_index.back().push_back(i);
    }
    st.groups.push_back(std::move(trained));
  }
  if (!first_trained.defined()) {
    throw Error("ZeroRedundancyOptimizer: no parameter requires grad (" + std::to_string(st.frozen.size()) +
                " frozen), so there is nothing to shard");
  }
  NoGradGuard no_grad;
  for (const auto& [name, p] : st.frozen) detail::broadcast_from_rank0(group, p);  // one model: rank 0's
  const int n = group.size();
  std::vector<nn::optim::ParamGroup> local_groups;
  std::vector<size_t> first_order;  // each group's buckets from its last, group by group
  for (size_t g = 0; g < st.groups.size(); ++g) {
    const TensorList& params = st.groups[g].params;
    const Tensor& model = params.empty() ? first_trained : params.front();  // an empty group: a shard of 0
    const TensorOptions flat_options(model.dtype(), model.device());
    for (const Tensor& p : params) {
      if (p.dtype() != model.dtype() || p.device() != model.device()) {
        throw DTypeError("ZeroRedundancyOptimizer: group " + std::to_string(g) + " mixes " + dtype_name(model.dtype()) +
                         " on " + model.device().str() + " with " + dtype_name(p.dtype()) + " on " + p.device().str() +
                         "; one flat buffer needs one of each");
      }
    }
    // Buckets from the group's last parameter back (backward's order), closed at bucket_bytes, then
    // laid out in the group's order.
    std::vector<State::Bucket> mine;
    int64_t bytes = 0;
    for (size_t i = params.size(); i-- > 0;) {
      const int64_t pb = params[i].numel() * static_cast<int64_t>(params[i].element_size());
      if (mine.empty() || bytes + pb > options.bucket_bytes) {
        mine.push_back(State::Bucket{g, i + 1, i + 1, 0, 0, 0});
        bytes = 0;
      }
      mine.back().first = i;
      bytes += pb;
    }
    std::reverse(mine.begin(), mine.end());
    int64_t flat_numel = 0;
    for (State::Bucket& b : mine) {
      b.flat_offset = flat_numel;
      b.shard_offset = flat_numel / n;
      b.numel = (detail::total_numel(st.bucket_params(b)) + n - 1) / n * n;
      flat_numel += b.numel;
    }
    for (size_t j = mine.size(); j-- > 0;) first_order.push_back(st.buckets.size() + j);  // the last bucket first
    st.buckets.insert(st.buckets.end(), mine.begin(), mine.end());
    st.shard_numel.push_back(flat_numel / n);
    st.flats.push_back(zeros({flat_numel}, flat_options));
    // Rank 0's parameters everywhere, then this rank's slices of them as the local optimizer's leaf.
    for (const State::Bucket& b : mine) {
      Tensor flat = st.flat_of(b);
      detail::pack(st.bucket_params(b), flat, /*grads=*/false);
    }
    if (flat_numel > 0) group.broadcast(st.flats[g], 0)->wait();
    for (const State::Bucket& b : mine) detail::unpack(st.flat_of(b), st.bucket_params(b), /*grads=*/false);
    Tensor shard = zeros({flat_numel / n}, flat_options);
    shard.set_requires_grad(true);
    st.shards.push_back(shard);
    st.shard_grads.push_back(empty({flat_numel / n}, flat_options));
    nn::optim::ParamGroup lg = st.groups[g];
    lg.params = {shard};
    local_groups.push_back(std::move(lg));
  }
  st.refresh_shards();
  st.works.resize(st.buckets.size());
  st.scratch.resize(st.groups.size());
  st.wire_flats.resize(st.buckets.size());
  for (const State::Bucket& b : st.buckets) st.bucket_flats.push_back(st.releases() ? Tensor() : st.flat_of(b));
  if (st.releases()) st.flats.clear();  // stage 2: each bucket's buffer only while in use
  st.local = make(std::move(local_groups));
  if (!st.local) throw Error("ZeroRedundancyOptimizer: the factory returned no optimizer");
  // The factory must build over what it was given: one group per group, each the shard alone
  // (an optimizer over other tensors would step nothing of the model's, silently).
  bool over_shards = st.local->num_groups() == st.shards.size();
  for (size_t g = 0; over_shards && g < st.shards.size(); ++g) {
    const TensorList& ps = st.local->group(g).params;
    over_shards = ps.size() == 1 && ps.front().impl() == st.shards[g].impl();
  }
  if (!over_shards) {
    throw Error("ZeroRedundancyOptimizer: the factory's optimizer must be built over the groups it is given (" +
                std::to_string(st.shards.size()) + (st.shards.size() == 1 ? " group" : " groups") +
                " of one shard each); it has " + std::to_string(st.local->num_groups()) +
                (st.local->num_groups() == 1 ? " group" : " groups") + " over other tensors");
  }
  // The hooks hold the state weakly: once the optimizer is gone, they do nothing. Overlap off: the
  // clip or the step reduces, and no hooks are registered.
  std::weak_ptr<State> weak = state_;
  std::vector<size_t> bucket_of;  // per hooked parameter
  for (size_t b = 0; b < st.buckets.size() && options.overlap; ++b) {
    const State::Bucket& bucket = st.buckets[b];
    for (size_t i = bucket.first; i < bucket.last; ++i) {
      const Tensor& p = st.groups[bucket.group].params[i];
      const size_t k = bucket_of.size();
      bucket_of.push_back(b);
      st.hooked_names.push_back("parameter " + std::to_string(i) + " of group " + std::to_string(bucket.group) +
                                " (shape " + shape_str(p.sizes()) + ")");
      p.register_post_accumulate_grad_hook([weak, k](Tensor&) {
        if (std::shared_ptr<State> s = weak.lock()) s->on_gradient(k, weak);
      });
    }
  }
  st.schedule = detail::BucketSchedule(std::move(bucket_of), std::move(first_order));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  try {
    state_->finish();  // no reduce-scatter left writing into buffers about to be freed
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed collective has nothing left to write
  }
}

nn::optim::Optimizer& ZeroRedundancyOptimizer::local() { return *state_->local; }
const std::vector<int64_t>& ZeroRedundancyOptimizer::shard_numel() const { return state_->shard_numel; }
size_t ZeroRedundancyOptimizer::num_buckets() const { return state_->buckets.size(); }
int64_t ZeroRedundancyOptimizer::reductions() const { return state_->reductions; }

void ZeroRedundancyOptimizer::set_profiler(profile::StepProfiler* profiler) {
  state_->profiler = profiler != nullptr && profiler->enabled() ? profiler : nullptr;
}

NoSync ZeroRedundancyOptimizer::no_sync() { return NoSync(std::shared_ptr<bool>(state_, &state_->sync)); }

namespace {

// Each rank checks only its own shard for inf and NaN: the flags are combined over the group.
void set_found_inf_reducer(nn::amp::GradScaler& scaler, ProcessGroup& group) {
  ProcessGroup* pg = &group;
  scaler.set_found_inf_reducer([pg](Tensor& flag) { pg->all_reduce(flag, ReduceOp::Max)->wait(); });
}

void step_with(ZeroRedundancyOptimizer::State& st, nn::amp::GradScaler* scaler) {
  st.check_frozen_unchanged("ZeroRedundancyOptimizer::step");
  NoGradGuard no_grad;
  st.reduce_all();
  st.consumed();
  st.refresh_shards();
  if (scaler != nullptr) {
    scaler->step(*st.local);
  } else {
    st.local->step();
  }
  st.gather_parameters();
}

}  // namespace

void ZeroRedundancyOptimizer::step() { step_with(*state_, nullptr); }

void ZeroRedundancyOptimizer::step(nn::amp::GradScaler& scaler) {
  set_found_inf_reducer(scaler, *state_->pg);
  step_with(*state_, &scaler);
}

Tensor ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type, nn::amp::GradScaler* scaler) {
  nn::optim::check_clip_options("ZeroRedundancyOptimizer::clip_grad_norm_", max_norm, norm_type);
  NoGradGuard no_grad;
  State& st = *state_;
  st.check_frozen_unchanged("ZeroRedundancyOptimizer::clip_grad_norm_");
  st.reduce_all();
  if (scaler != nullptr) {
    set_found_inf_reducer(*scaler, *st.pg);
    scaler->unscale_(*st.local);
  }
  TensorList grads;
  for (const Tensor& s : st.shards) grads.push_back(s.grad());
  Tensor total = foreach_norm(grads, norm_type);  // this rank's shards; the padding holds zeros
  if (std::isinf(norm_type)) {
    st.pg->all_reduce(total, ReduceOp::Max)->wait();
  } else {
    total = pow(total, Scalar(norm_type));
    st.pg->all_reduce(total, ReduceOp::Sum)->wait();
    total = pow(total, Scalar(1.0 / norm_type));
  }
  nn::optim::clip_grads_with_norm_(st.shards, max_norm, total);
  return total;
}

std::map<std::string, Tensor> ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  const State& st = *state_;
  const int n = st.pg->size();
  std::map<std::string, Tensor> local = st.local->state_dict();
  std::map<std::string, Tensor> out;
  size_t first = 0;  // the flat index of the group's first parameter in an unsharded optimizer
  for (size_t g = 0; g < st.groups.size(); ++g) {
    const TensorList& params = st.groups[g].params;  // its trainable ones
    const std::vector<size_t>& index = st.given_index[g];
    // Local parameter g is group g's shard. Each rank's shards got their state at the same step,
    // so every rank gathers the same names in the same order (a group of frozen ones has none).
    for (const std::string& name : st.local->state_names()) {
      auto it = local.find(state_key(g, name));
      if (it == local.end() || params.empty()) continue;
      if (st.local->is_scalar_state(name)) {  // one number per shard: every parameter of the group's
        for (size_t i = 0; i < params.size(); ++i) out[state_key(first + index[i], name)] = it->second.clone();
        continue;
      }
      const TensorOptions options(it->second.dtype(), it->second.device());
      Tensor whole = empty({st.shard_numel[g] * n}, options);  // the ranks' shards end to end
      st.pg->all_gather(whole, it->second)->wait();
      std::vector<Tensor> rows;  // each parameter's state, flat
      for (const Tensor& p : params) rows.push_back(empty({p.numel()}, options));
      for (int r = 0; r < n; ++r) {
        st.for_each_piece(g, r, [&](size_t i, int64_t at, int64_t shard_at, int64_t len) {
          rows[i].narrow(0, at, len).copy_(whole.narrow(0, r * st.shard_numel[g] + shard_at, len));
        });
      }
      for (size_t i = 0; i < params.size(); ++i) {
        out[state_key(first + index[i], name)] = rows[i].view(params[i].sizes());
      }
    }
    // The shard's step count is every parameter's of the group: they are stepped together.
    if (auto it = local.find(state_key(g, "step")); it != local.end()) {
      for (size_t i = 0; i < params.size(); ++i) out[state_key(first + index[i], "step")] = it->second.clone();
    }
    out["group." + std::to_string(g) + ".lr"] = local.at("group." + std::to_string(g) + ".lr");
    // The whole group's size, as an unsharded optimizer writes it (the local one holds one shard).
    out["group." + std::to_string(g) + ".params"] =
        full({}, static_cast<double>(st.given_sizes[g]), TensorOptions(DType::Int64));
    first += st.given_sizes[g];
  }
  out["step"] = local.at("step");
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  const char* op = "ZeroRedundancyOptimizer::load_state_dict";
  NoGradGuard no_grad;
  State& st = *state_;
  // Flat index (every parameter given) -> (group, index among its trainable ones; kFrozen for a
  // frozen one).
  constexpr size_t kFrozen = static_cast<size_t>(-1);
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t g = 0; g < st.groups.size(); ++g) {
    std::vector<size_t> trained(st.given_sizes[g], kFrozen);
    for (size_t j = 0; j < st.given_index[g].size(); ++j) trained[st.given_index[g][j]] = j;
    for (size_t j : trained) where.emplace_back(g, j);
  }
  const std::vector<std::string> names = st.local->state_names();
  // The local optimizer's map: the group keys as given (its own load checks them), each state
  // tensor's shard cut out of the parameters' state.
  std::map<std::string, Tensor> local;
  std::map<std::pair<size_t, std::string>, TensorList> by_group;  // (group, name) -> per parameter
  // (group, name) -> (a parameter, its value): the step count and the scalar states, one per shard
  std::map<std::pair<size_t, std::string>, std::pair<size_t, double>> group_scalar;
  for (const auto& [key, t] : state) {
    size_t index = 0, group = 0;
    std::string name, field;
    if (!nn::optim::Optimizer::parse_key(key, "state", index, name)) {
      if (nn::optim::Optimizer::parse_key(key, "group", group, field) && field == "params" &&
          group < st.groups.size()) {
        // The whole group's size: checked here, as the local optimizer's groups are one shard each.
        const size_t size = st.given_sizes[group];
        if (!t.defined() || t.numel() != 1 || t.dtype() != DType::Int64 ||
            t.to(Device::cpu()).item<int64_t>() != static_cast<int64_t>(size)) {
          throw Error(std::string(op) + ": \"" + key + "\" does not give group " + std::to_string(group) + "'s size, " +
                      std::to_string(size) + " parameters");
        }
        continue;
      }
      local[key] = t;  // "step", "group.<g>.lr", "group.<g>.step"; anything else is refused below
      continue;
    }
    if (index >= where.size()) {
      throw Error(std::string(op) + ": key \"" + key + "\" names parameter " + std::to_string(index) +
                  ", but there are " + std::to_string(where.size()));
    }
    if (where[index].second == kFrozen) {
      throw Error(std::string(op) + ": key \"" + key + "\" is state of parameter " + std::to_string(index) +
                  ", which was frozen (requires_grad false) when this optimizer was built: no shard holds it");
    }
    if (name == "step" || st.local->is_scalar_state(name)) {
      // The group's shard keeps one step count and one of each scalar state: each parameter's must
      // be the same.
      const auto [g, i] = where[index];
      const DType dtype = name == "step" ? DType::Float32 : nn::optim::Optimizer::state_dtype(st.groups[g].params[i]);
      if (!t.defined() || t.numel() != 1 || t.dtype() != dtype) {
        local[state_key(g, name)] = t;  // the local optimizer names what is wrong with it
        continue;
      }
      const double value = t.to(Device::cpu()).item<double>();
      auto [it, fresh] = group_scalar.try_emplace({g, name}, index, value);
      if (!fresh && !(it->second.second == value)) {
        char values[64];
        std::snprintf(values, sizeof values, "%.17g and %.17g", value, it->second.second);
        throw Error(std::string(op) + ": \"" + key + "\" and parameter " + std::to_string(it->second.first) +
                    " of the same group (" + std::to_string(g) + ") have " + (name == "step" ? "step counts" : name) +
                    " " + values + "; a sharded group steps its parameters together and keeps one");
      }
      local[state_key(g, name)] = t;
      continue;
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw Error(std::string(op) + ": unexpected key \"" + key + "\": this optimizer keeps no state \"" + name + "\"");
    }
    const auto [g, i] = where[index];
    const Tensor& p = st.groups[g].params[i];
    const DType dtype = nn::optim::Optimizer::state_dtype(p);
    if (!t.defined() || t.sizes() != p.sizes() || t.dtype() != dtype) {
      throw Error(std::string(op) + ": \"" + key + "\" is " +
                  (t.defined() ? shape_str(t.sizes()) + " " + dtype_name(t.dtype()) : std::string("undefined")) +
                  ", expected " + shape_str(p.sizes()) + " " + dtype_name(dtype) + " for its parameter");
    }
    TensorList& list = by_group[{g, name}];
    list.resize(st.groups[g].params.size());
    list[i] = t;
  }
  for (const auto& entry : by_group) {
    const size_t g = entry.first.first;
    const std::string& name = entry.first.second;
    const TensorList& list = entry.second;  // a plain reference: clang 14's lambdas cannot capture bindings
    const Tensor& shard = st.shards[g];
    Tensor mine = zeros({st.shard_numel[g]}, TensorOptions(nn::optim::Optimizer::state_dtype(shard), shard.device()));
    st.for_each_piece(g, st.rank(), [&](size_t i, int64_t at, int64_t shard_at, int64_t len) {
      if (list[i].defined()) mine.narrow(0, shard_at, len).copy_(list[i].contiguous().view({-1}).narrow(0, at, len));
    });
    local[state_key(g, name)] = mine;
  }
  st.local->load_state_dict(local);  // checks the group keys and the step before it changes anything
}

void ZeroRedundancyOptimizer::zero_grad() {
  State& st = *state_;
  st.finish();  // a backward that failed may have left reduce-scatters writing the shards' gradients
  for (auto& g : st.groups) {
    for (Tensor p : g.params) p.set_grad(Tensor());  // a handle: the parameter itself
  }
  for (Tensor& s : st.shards) s.set_grad(Tensor());
  st.consumed();
}

}  // namespace kiln::dist
