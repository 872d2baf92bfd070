// The device prefetcher: one batch in flight on a copy stream of its own.
#include "data/prefetcher.h"

#include <utility>

#include "core/cuda/runtime.h"
#include "core/storage.h"
#include "kernels/error.h"

namespace kiln::data {

struct DevicePrefetcher::Impl {
  std::unique_ptr<cuda::CudaStream> copy_stream;
  std::unique_ptr<cuda::Event> copied;
  bool primed = false;            // a batch (or the epoch's end) is in flight
  std::optional<Example> pending;  // the batch in flight; nullopt when the epoch has ended
  LoaderPosition pending_position;
};

namespace {

// Makes `t`'s memory count as used by `stream` too, for the caching allocator.
void use_on(const Tensor& t, Stream stream) {
  if (t.defined() && t.storage()) t.storage()->record_stream(stream);
}

}  // namespace

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, Device device)
    : loader_(loader), device_(device), impl_(std::make_unique<Impl>()) {
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
  auto issue = [&] {
    m.pending_position = loader_.position();
    m.pending = loader_.next();
    m.primed = true;
    if (!m.pending) return;
    cuda::DeviceGuard guard(device_.index);
    cuda::StreamGuard on_copy(m.copy_stream->get(), device_.index);
    Example& b = *m.pending;
    if (b.data.defined()) b.data = b.data.to(device_, /*non_blocking=*/true);
    if (b.target.defined()) b.target = b.target.to(device_, /*non_blocking=*/true);
    m.copied->record(m.copy_stream->get());
  };
  if (!m.primed) issue();
  if (!m.pending) {  // the epoch is over; the next call starts the next one
    m.primed = false;
    return std::nullopt;
  }
  Example batch = std::move(*m.pending);
  m.pending.reset();
  const Stream compute = cuda::current_stream(device_.index);
  m.copied->wait(compute);
  use_on(batch.data, compute);
  use_on(batch.target, compute);
  issue();  // batch i + 1 copies while the caller computes on batch i
  return batch;
}

LoaderPosition DevicePrefetcher::position() const {
  return impl_->primed && impl_->pending ? impl_->pending_position : loader_.position();
}

}  // namespace kiln::data
