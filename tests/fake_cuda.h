// A tensor that claims to live on cuda:0 while holding host memory, for tests without a GPU: device
// checks must refuse it before anything reads it. Its storage is a static block nobody frees.
#pragma once

#include <memory>
#include <utility>

#include "core/storage.h"
#include "core/tensor.h"

namespace kiln::test {

inline Tensor fake_cuda(const Shape& s, DType dtype = DType::Float32) {
  alignas(64) static unsigned char block[1 << 16];
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(DataPtr(block, sizeof block, Device::cuda(0), nullptr));
  impl->dtype = dtype;
  impl->sizes = s;
  impl->strides = contiguous_strides(s);
  return Tensor(std::move(impl));
}

}  // namespace kiln::test
