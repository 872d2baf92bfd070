// Moves a DataLoader's batches to a device one batch ahead: the host-to-device copy of batch i + 1
// runs on a copy stream while the training step computes on batch i. Non-obvious decisions: the
// compute stream waits on an event recorded after the copy (a stream wait, never a host one), and
// each copied tensor is marked as used on the compute stream (record_stream), so the caching
// allocator does not hand its memory to the copy stream again until the step that reads it is done;
// the pinned source is held the same way until its copy has run. On the CPU the batches pass
// through untouched.
#pragma once

#include <memory>
#include <optional>

#include "core/device.h"
#include "data/loader.h"

namespace kiln::data {

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
