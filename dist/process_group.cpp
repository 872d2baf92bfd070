// ProcessGroup's shared parts: argument checks and the blocking point-to-point forms.
#include "dist/process_group.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops/factory.h"
#include "dist/reduce.h"
#include "kernels/error.h"

namespace kiln::dist {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool completed() const override { return true; }
};

// Done when all of its parts are (an exchange's receive and send).
class BothWork final : public Work {
 public:
  BothWork(std::shared_ptr<Work> a, std::shared_ptr<Work> b) : a_(std::move(a)), b_(std::move(b)) {}
  void wait() override {
    a_->wait();
    b_->wait();
  }
  void synchronize() override {
    a_->synchronize();
    b_->synchronize();
  }
  bool completed() const override { return a_->completed() && b_->completed(); }

 private:
  std::shared_ptr<Work> a_, b_;
};

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Product: return "product";
  }
  return "?";
}

const char* all_reduce_algo_name(AllReduceAlgo algo) { return algo == AllReduceAlgo::Ring ? "ring" : "native"; }

double dist_timeout() {
  const char* v = std::getenv("KILN_DIST_TIMEOUT");
  if (v == nullptr || *v == 0) return 600.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (end == v || *end != 0 || !(t > 0) || t > 1e9) {
    throw Error(std::string("dist: KILN_DIST_TIMEOUT must be a positive number of seconds, got '") + v + "'");
  }
  return t;
}

bool dist_debug() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_DIST_DEBUG");
    if (v == nullptr || *v == 0 || std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "1") == 0) return true;
    throw Error(std::string("dist: KILN_DIST_DEBUG must be 0 or 1, got '") + v + "'");
  }();
  return on;
}

std::shared_ptr<Work> completed_work() { return std::make_shared<DoneWork>(); }

void check_rank(const char* op, int rank, const ProcessGroup& group) {
  if (rank < 0 || rank >= group.size()) {
    throw IndexError(std::string(op) + ": rank " + std::to_string(rank) + " is outside [0, " +
                     std::to_string(group.size()) + ")");
  }
}

void check_tensor(const char* op, const Tensor& t, const ProcessGroup& group, bool any_dense) {
  if (!t.defined()) throw Error(std::string(op) + ": the tensor is undefined");
  if (any_dense ? !t.is_non_overlapping_and_dense() : !t.is_contiguous()) {
    const char* need =
        any_dense ? "must be dense (its elements one block of memory, in any layout: collectives move it)"
                  : "must be contiguous (its ranks' slots are blocks of its row-major order); pass .contiguous()";
    throw Error(std::string(op) + ": the tensor " + shape_str(t.sizes()) + " with strides " + shape_str(t.strides()) +
                " " + need);
  }
  if (t.device().type != group.device().type) {
    throw DeviceError(std::string(op) + ": the " + group.backend() + " backend moves " +
                      (group.device().is_cpu() ? "CPU" : "CUDA") + " tensors, got one on " + t.device().str() +
                      " (dist::world_for(device) gives the group for a device)");
  }
}

namespace {

// A dense tensor's block of memory as a contiguous 1-d tensor (itself when it is contiguous).
Tensor as_block(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  NoGradGuard no_grad;
  return t.detach().as_strided({t.numel()}, {1}, t.storage_offset());
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op, AllReduceAlgo algo) {
  check_tensor("all_reduce", tensor, *this, /*any_dense=*/true);
  detail::check_supported("all_reduce", tensor.dtype(), op);
  agree_across_ranks("all_reduce", &tensor, static_cast<int64_t>(op), static_cast<int64_t>(algo));
  if (tensor.numel() == 0) return completed_work();
  Tensor block = as_block(tensor);
  return start_all_reduce(block, detail::effective_op(tensor.dtype(), op), algo);
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& tensor, int root) {
  check_tensor("broadcast", tensor, *this, /*any_dense=*/true);
  check_rank("broadcast", root, *this);
  agree_across_ranks("broadcast", &tensor, root, 0);
  if (tensor.numel() == 0) return completed_work();
  Tensor block = as_block(tensor);
  return start_broadcast(block, root);
}

int64_t detail::layout_code(const Tensor& t) {
  if (t.is_contiguous()) return 0;
  std::vector<int64_t> dims;  // longer than one, outermost first; ties keep the lower dim outside
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  int64_t code = 0;
  for (int64_t d : dims) code = code * 16 + std::min<int64_t>(d + 1, 15);  // 15 dims fit in 60 bits
  return code;
}

namespace {

// One rank's call as agree_across_ranks sends it; kOp indexes kCollectives.
enum Word { kCall, kOp, kDtype, kNumel, kArg, kAlgo, kLayout, kWords };

// A layout code as "dims 0, 2, 3, 1 outermost first" (layout_code); a code no build makes by number.
std::string layout_name(int64_t code) {
  std::vector<int64_t> dims;
  for (int64_t c = code; c > 0; c /= 16) dims.insert(dims.begin(), c % 16 - 1);
  const bool known = code > 0 && std::find(dims.begin(), dims.end(), -1) == dims.end();
  if (!known) return "layout code " + std::to_string(code);
  std::string s = "dims ";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + " outermost first";
}
constexpr std::array<const char*, 5> kCollectives = {"barrier", "all_reduce", "reduce_scatter", "all_gather",
                                                     "broadcast"};
constexpr int64_t kReduceOps = 5, kAllReduceAlgos = 2;  // the values of ReduceOp and AllReduceAlgo

}  // namespace

std::string detail::describe_call(const int64_t* w) {
  std::string s = "collective " + std::to_string(w[kCall]);
  // A rank of another kiln build may send a code this one does not know: named as a number.
  if (w[kOp] < 0 || w[kOp] >= static_cast<int64_t>(kCollectives.size())) {
    return s + " has the unknown code " + std::to_string(w[kOp]) + " (a rank running another kiln build?)";
  }
  const std::string op = kCollectives[static_cast<size_t>(w[kOp])];
  s += " is " + op;
  if (op == "barrier") return s;
  // A code past this build's enum is named as its number (a cast would wrap it onto a known one).
  const auto named = [](int64_t code, int64_t count, auto name_of) {
    return code >= 0 && code < count ? std::string(name_of(code)) : "code " + std::to_string(code);
  };
  s += " of " + std::to_string(w[kNumel]) + " " +
       named(w[kDtype], kNumDTypes, [](int64_t c) { return dtype_name(static_cast<DType>(c)); }) + " elements";
  if (op == "all_reduce" || op == "reduce_scatter") {
    s += ", " + named(w[kArg], kReduceOps, [](int64_t c) { return reduce_op_name(static_cast<ReduceOp>(c)); });
  }
  if (op == "all_reduce") {
    s += ", " + named(w[kAlgo], kAllReduceAlgos,
                      [](int64_t c) { return all_reduce_algo_name(static_cast<AllReduceAlgo>(c)); });
  }
  if (op == "broadcast") s += " from root " + std::to_string(w[kArg]);
  if (w[kLayout] != 0) s += ", laid out with " + layout_name(w[kLayout]);
  return s;
}

namespace {

// Set while agree_across_ranks runs its own all_gather, which must not check itself.
thread_local bool g_agreeing = false;

}  // namespace

void ProcessGroup::agree_across_ranks(const char* op, const Tensor* t, int64_t arg, int64_t algo) {
  if (!dist_debug() || g_agreeing || size() == 1) return;
  const std::string name = op;
  int64_t code = 0;
  while (name != kCollectives.at(static_cast<size_t>(code))) ++code;
  Tensor mine = empty({kWords}, DType::Int64);
  int64_t* w = mine.data_ptr<int64_t>();
  w[kCall] = debug_calls_++;
  w[kOp] = code;
  w[kDtype] = t ? static_cast<int64_t>(t->dtype()) : 0;
  w[kNumel] = t ? t->numel() : 0;
  w[kArg] = arg;
  w[kAlgo] = algo;
  w[kLayout] = t ? detail::layout_code(*t) : 0;
  Tensor all = empty({kWords * size()}, TensorOptions(DType::Int64, device()));
  {
    g_agreeing = true;
    struct Reset {
      ~Reset() { g_agreeing = false; }
    } reset;
    Tensor sent = mine.to(device());
    all_gather(all, sent)->wait();
  }
  const Tensor host = all.to(Device::cpu());
  const int64_t* a = host.data_ptr<int64_t>();
  bool same = true;
  for (int r = 1; r < size(); ++r) same = same && std::equal(a, a + kWords, a + r * kWords);
  if (same) return;
  std::string calls;
  for (int r = 0; r < size(); ++r) {
    calls += "; rank " + std::to_string(r) + ": " + detail::describe_call(a + r * kWords);
  }
  throw Error(name + ": the ranks' calls differ (KILN_DIST_DEBUG=1)" + calls);
}

namespace {

constexpr int kRingTag = ProcessGroup::kMaxTag + 1;

// A point-to-point side's checks, all made before anything is posted: a receive posted before its
// send's error would wait for a message that never comes.
void check_p2p(const char* op, const Tensor& t, int peer, int tag, int max_tag, const ProcessGroup& g) {
  check_tensor(op, t, g, /*any_dense=*/true);
  check_rank(op, peer, g);
  if (tag < 0 || tag > max_tag) {
    throw Error(std::string(op) + ": tag must be in [0, " + std::to_string(ProcessGroup::kMaxTag) + "], got " +
                std::to_string(tag) + (tag == kRingTag ? " (the ring all-reduce's own)" : ""));
  }
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::isend(const Tensor& tensor, int dst, int tag) {
  Tensor none;
  check_p2p("isend", tensor, dst, tag, kMaxTag, *this);
  return start_isend_irecv(as_block(tensor), dst, none, 0, tag);
}

std::shared_ptr<Work> ProcessGroup::irecv(Tensor& tensor, int src, int tag) {
  check_p2p("irecv", tensor, src, tag, kMaxTag, *this);
  Tensor block = as_block(tensor);
  return start_isend_irecv(Tensor(), 0, block, src, tag);
}

void ProcessGroup::send(const Tensor& tensor, int dst, int tag) { isend(tensor, dst, tag)->wait(); }

void ProcessGroup::recv(Tensor& tensor, int src, int tag) { irecv(tensor, src, tag)->wait(); }

std::shared_ptr<Work> ProcessGroup::isend_irecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  if (out.defined()) check_p2p("isend", out, dst, tag, kMaxTag, *this);
  if (in.defined()) check_p2p("irecv", in, src, tag, kMaxTag, *this);
  if (!out.defined() && !in.defined()) return completed_work();
  Tensor block = as_block(in);
  return start_isend_irecv(as_block(out), dst, block, src, tag);
}

std::shared_ptr<Work> ProcessGroup::ring_exchange(const Tensor& out, int dst, Tensor& in, int src) {
  if (out.defined()) check_p2p("ring_all_reduce (send)", out, dst, kRingTag, kRingTag, *this);
  if (in.defined()) check_p2p("ring_all_reduce (receive)", in, src, kRingTag, kRingTag, *this);
  if (!out.defined() && !in.defined()) return completed_work();
  Tensor block = as_block(in);
  return start_isend_irecv(as_block(out), dst, block, src, kRingTag);
}

bool detail::shares_bytes(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.storage() != b.storage()) return false;
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  const int64_t an = a.numel() * static_cast<int64_t>(a.element_size());
  const int64_t bn = b.numel() * static_cast<int64_t>(b.element_size());
  return a0 < b0 + bn && b0 < a0 + an;
}

bool detail::is_rank_slot(const Tensor& whole, const Tensor& slot, int rank) {
  const int64_t bytes = slot.numel() * static_cast<int64_t>(slot.element_size());
  return whole.storage() == slot.storage() &&
         static_cast<const char*>(slot.data_ptr()) == static_cast<const char*>(whole.data_ptr()) + rank * bytes;
}

std::shared_ptr<Work> detail::both_work(std::shared_ptr<Work> a, std::shared_ptr<Work> b) {
  return std::make_shared<BothWork>(std::move(a), std::move(b));
}

void ProcessGroup::send_recv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  isend_irecv(out, dst, in, src, tag)->wait();
}

}  // namespace kiln::dist
