// Storage: one allocation shared by a tensor and all its views.
#pragma once

#include <cstddef>
#include <memory>

#include "core/allocator.h"

namespace kiln {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  explicit Storage(DataPtr data) : data_(std::move(data)) {}

  void* data() const { return data_.get(); }
  size_t nbytes() const { return data_.nbytes(); }
  Device device() const { return data_.device(); }
  Allocator* allocator() const { return data_.allocator(); }
  // The block is used on `stream` as well as where it was allocated (see Allocator).
  void record_stream(Stream stream) const;

 private:
  DataPtr data_;
};

}  // namespace kiln
