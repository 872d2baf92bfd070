// The device prefetcher: one batch in flight on a copy stream of its own.
#include "data/prefetcher.h"

#include <utility>

#include "core/cuda/runtime.h"
#include "core/storage.h"
#include "kernels/error.h"

namespace kiln::data {

namespace detail {

void LookAhead::read_ahead(const Step& start) {
  ahead_position_ = loader_.position();
  try {
    ahead_ = loader_.next();
    primed_ = true;
    if (ahead_) start(*ahead_);
  } catch (...) {
    // Nothing is held, and the loader is at that batch again: it stays at a batch it failed to
    // read, and goes back from one it read and whose start failed.
    primed_ = false;
    ahead_.reset();
    if (loader_.position().epoch != ahead_position_.epoch || loader_.position().batch != ahead_position_.batch) {
      loader_.set_position(ahead_position_);
    }
    repositions_ = loader_.repositions();  // that move is this reader's own
    throw;
  }
  repositions_ = loader_.repositions();
}

std::optional<Example> LookAhead::next(const Step& start, const Step& finish) {
  if (moved()) {  // what is held belongs to the position the loader was moved away from (read_ahead,
                  // below, takes the new count)
    primed_ = false;
    ahead_.reset();
    error_ = nullptr;
  }
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
  if (!primed_) read_ahead(start);  // a failure here is this call's own
  if (!ahead_) {  // the epoch is over; the next call starts the next one
    primed_ = false;
    return std::nullopt;
  }
  finish(*ahead_);  // while still held: if it throws, the next call hands out this batch again
  Example batch = std::move(*ahead_);
  ahead_.reset();
  try {
    read_ahead(start);
  } catch (...) {
    error_ = std::current_exception();
  }
  return batch;
}

LoaderPosition LookAhead::position() const {
  // Held ahead, a batch or the epoch's end: where the loader was before reading it (after the last
  // batch, the epoch's end, as the plain loader says then; the loader itself is at the next epoch).
  return primed_ && !moved() ? ahead_position_ : loader_.position();
}

}  // namespace detail

struct DevicePrefetcher::Impl {
  explicit Impl(DataLoader& loader) : ahead(loader) {}
  std::unique_ptr<cuda::CudaStream> copy_stream;
  std::unique_ptr<cuda::Event> copied;
  detail::LookAhead ahead;
};

namespace {

// Makes `t`'s memory count as used by `stream` too, for the caching allocator.
void use_on(const Tensor& t, Stream stream) {
  if (t.defined() && t.storage()) t.storage()->record_stream(stream);
}

}  // namespace

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, Device device)
    : loader_(loader), device_(device), impl_(std::make_unique<Impl>(loader)) {
  if (device_.is_cuda()) {
    if (!cuda::is_available()) {
      throw DeviceError("DevicePrefetcher: " + device_.str() + " is not available (" + cuda::unavailable_reason() +
                        ")");
    }
    cuda::DeviceGuard guard(device_.index);
    impl_->copy_stream = std::make_unique<cuda::CudaStream>(device_.index);
    impl_->copied = std::make_unique<cuda::Event>();
  }
}

DevicePrefetcher::~DevicePrefetcher() {
  // The batch in flight may still be copying: its memory must not go back to the allocators first.
  if (impl_->copy_stream) impl_->copy_stream->synchronize();
}

std::optional<Example> DevicePrefetcher::next() {
  if (!device_.is_cuda()) return loader_.next();
  Impl& m = *impl_;
  // A held batch that the loader's set_position made stale is dropped: its copy finishes first, as
  // in the destructor.
  if (m.ahead.moved()) m.copy_stream->synchronize();
  // Batch i + 1 copies on the copy stream while the caller computes on batch i.
  auto start_copy = [&](Example& b) {
    cuda::DeviceGuard guard(device_.index);
    cuda::StreamGuard on_copy(m.copy_stream->get(), device_.index);
    if (b.data.defined()) b.data = b.data.to(device_, /*non_blocking=*/true);
    if (b.target.defined()) b.target = b.target.to(device_, /*non_blocking=*/true);
    m.copied->record(m.copy_stream->get());
  };
  auto hand_over = [&](Example& b) {
    const Stream compute = cuda::current_stream(device_.index);
    m.copied->wait(compute);
    use_on(b.data, compute);
    use_on(b.target, compute);
  };
  return m.ahead.next(start_copy, hand_over);
}

LoaderPosition DevicePrefetcher::position() const {
  return device_.is_cuda() ? impl_->ahead.position() : loader_.position();
}

}  // namespace kiln::data
