// Moves a DataLoader's batches to a device one batch ahead: the host-to-device copy of batch i + 1
// runs on a copy stream while the training step computes on batch i. Non-obvious decisions: the
// compute stream waits on an event recorded after the copy (a stream wait, never a host one), and
// each copied tensor is marked as used on the compute stream (record_stream), so the caching
// allocator does not hand its memory to the copy stream again until the step that reads it is done;
// the pinned source is held the same way until its copy has run. On the CPU the batches pass
// through untouched.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "core/device.h"
#include "data/loader.h"

namespace kiln::data {

namespace detail {

// A loader read one batch ahead, whatever "starting" a batch means (the device prefetcher starts
// its copy): next() hands out the batch it holds and starts the one after. A failure while reading
// ahead (the loader's error, a failed copy) is kept for the next call, which would have returned
// that batch, and the loader is put back at it; so the batch in hand is still returned, no batch is
// lost, and the error comes where the loader itself would have raised it. A set_position or
// load_state on the loader in between drops what is held (a batch or an error of the old position):
// the next call reads from the new one. On the CPU it runs under the tests; the device prefetcher
// is the same code with copies.
class LookAhead {
 public:
  using Step = std::function<void(Example&)>;
  explicit LookAhead(DataLoader& loader) : loader_(loader), repositions_(loader.repositions()) {}
  // The next batch (after `finish` ran on it), with the one after it read and `start` run on it;
  // nullopt at the end of the loader's epoch, as DataLoader::next.
  std::optional<Example> next(const Step& start, const Step& finish);
  // The position of the batch next() returns next: the loader's, less the batch (or the epoch's end)
  // held ahead.
  LoaderPosition position() const;
  // Whether the loader was set to a position since the batch (or error) held was taken: next()
  // drops it then.
  bool moved() const { return loader_.repositions() != repositions_; }

 private:
  void read_ahead(const Step& start);

  DataLoader& loader_;
  bool primed_ = false;            // a batch (or the epoch's end) is held ahead
  std::optional<Example> ahead_;   // the batch held; nullopt when the epoch has ended
  LoaderPosition ahead_position_;  // where the loader was before reading it
  std::exception_ptr error_;       // a failure reading ahead, for the next call
  uint64_t repositions_ = 0;       // the loader's repositions() when it was taken
};

}  // namespace detail

class DevicePrefetcher {
 public:
  // `loader` must outlive the prefetcher. Copies are asynchronous only from pinned batches
  // (DataLoaderOptions::pin_memory); others are copied, correctly but synchronously.
  DevicePrefetcher(DataLoader& loader, Device device);
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  Device device() const { return device_; }
  // The loader's next batch on the device, ready for work issued on the device's current stream;
  // nullopt at the end of the loader's epoch (as DataLoader::next). The loader's position counts
  // the batch already in flight, so a checkpoint takes position() from here.
  std::optional<Example> next();
  // The position of the next batch next() returns (the loader's, less the batch held in flight).
  LoaderPosition position() const;

  struct Impl;

 private:
  DataLoader& loader_;
  Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::data
