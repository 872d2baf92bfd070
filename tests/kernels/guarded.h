// What the CPU tests that run CUDA kernels on the emulator of kernels/simt/simt.h share besides the
// values: output buffers between guard bands that no kernel may touch, whether the emulator's two
// schedules gave the same bits, the storage type a float dtype's kernels are instantiated for, a
// launcher for host code that plans its own launches, and the bit-for-bit check of a launch
// against its CPU twin over an output's storage.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/half.h"
#include "kernels/simt/simt.h"

namespace kiln::test {

// n elements between two guard bands. The elements start as all-ones bytes (NaN in every float
// type), the bands as a pattern that no kernel writes.
template <typename E> class Guarded {
 public:
  explicit Guarded(int64_t n) : n_(count(n)), bytes_((n_ + 2 * kGuard) * sizeof(E), 0xFF) {
    const size_t band = kGuard * sizeof(E);
    std::fill(bytes_.begin(), bytes_.begin() + band, kBand);
    std::fill(bytes_.end() - band, bytes_.end(), kBand);
  }
  // The elements of `t` (contiguous, with elements of E's size) between guard bands.
  static Guarded copy_of(const Tensor& t) {
    REQUIRE(t.is_contiguous());
    REQUIRE(t.element_size() == sizeof(E));
    Guarded g(t.numel());
    std::memcpy(static_cast<void*>(g.data()), t.data_ptr(), static_cast<size_t>(t.numel()) * sizeof(E));
    return g;
  }
  E* data() { return reinterpret_cast<E*>(bytes_.data()) + kGuard; }
  const E* data() const { return reinterpret_cast<const E*>(bytes_.data()) + kGuard; }
  bool bands_intact() const {
    const size_t band = kGuard * sizeof(E), tail = band + n_ * sizeof(E);
    for (size_t i = 0; i < band; ++i) {
      if (bytes_[i] != kBand || bytes_[tail + i] != kBand) return false;
    }
    return true;
  }
  // The elements from `offset` on as a tensor of `dtype` and `shape`.
  Tensor tensor(DType dtype, const Shape& shape, size_t offset = 0) const {
    Tensor t = empty(shape, TensorOptions(dtype));
    REQUIRE(static_cast<size_t>(t.numel()) + offset == n_);
    std::memcpy(t.data_ptr(), data() + offset, (n_ - offset) * sizeof(E));
    return t;
  }

 private:
  static size_t count(int64_t n) {
    if (n < 0) throw std::invalid_argument("Guarded: a negative element count");
    return static_cast<size_t>(n);
  }
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kBand = 0x5A;
  size_t n_;
  std::vector<unsigned char> bytes_;
};

// A kernel's pointer to an optional tensor: its data, or nullptr when undefined.
inline const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Whether two tensors have the same dtype, sizes and bytes.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  const size_t bytes = static_cast<size_t>(a.numel()) * a.element_size();
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0;
}

// f.template operator()<S>() with S the storage type of float dtype t (float, Half or BFloat16), as
// KILN_CUDA_FLOAT_SWITCH picks it for a launch.
template <typename F> decltype(auto) with_float_storage(DType t, F&& f) {
  if (t == DType::Float32) return f.template operator()<float>();
  if (t == DType::Float16) return f.template operator()<Half>();
  return f.template operator()<BFloat16>();
}

// A launcher for the host code that plans its own launches (smallest_k, multinomial_launches,
// binary_dispatch; cuda_detail::StreamLaunch on a GPU): each launch runs on the emulator under
// `schedule`, in the grid asked for with its x and y extents capped at grid_cap and grid_cap_y
// blocks (so that the blocks of a grid-stride loop loop), and its kernel is appended to *kernels
// when that is set.
struct EmulatedLaunch {
  simt::Schedule schedule = simt::Schedule::Lowest;
  unsigned grid_cap = ~0u;
  std::vector<const void*>* kernels = nullptr;
  unsigned grid_cap_y = ~0u;
  template <class... Params, class... Args>
  void operator()(void (*kernel)(Params...), dim3 grid, unsigned block, const Args&... args) const {
    simt::LaunchConfig config;
    config.grid.x = std::min(grid.x, grid_cap);
    config.grid.y = std::min(grid.y, grid_cap_y);
    config.grid.z = grid.z;
    config.block.x = block;
    config.schedule = schedule;
    simt::launch(config, [&] { kernel(args...); });
    if (kernels) kernels->push_back(reinterpret_cast<const void*>(kernel));
  }
};

// A kernel's address, as EmulatedLaunch records it.
template <typename K> const void* kernel_address(K* kernel) { return reinterpret_cast<const void*>(kernel); }

// `out` is a view over dense storage of out.numel() elements at its start (dense, transposed or
// permuted). cpu(arg) fills `out`; emulated(arg, launch) fills a guarded copy of its storage
// through the launcher, in the grid it asks for and in one capped at 3 blocks. The copy starts as
// all-ones bytes, or as out's storage did when `keep` (for kernels that read their output). The
// storage bytes must agree each time, with `launches` launches made.
template <class Cpu, class Emulated>
void check_storage_bits(const std::string& what, const Tensor& out, const Cpu& cpu, const Emulated& emulated,
                        size_t launches = 1, bool keep = false) {
  const StridedArg arg = ops::make_arg("test", out);
  const size_t bytes = static_cast<size_t>(out.numel()) * out.element_size();
  const auto* storage = static_cast<const unsigned char*>(out.data_ptr());
  const std::vector<unsigned char> start(storage, keep ? storage + bytes : storage);
  cpu(arg);
  for (const unsigned grid_cap : {~0u, 3u}) {
    INFO(what << ", grid cap " << grid_cap);
    Guarded<unsigned char> emu(static_cast<int64_t>(bytes));
    if (keep) std::memcpy(emu.data(), start.data(), bytes);
    StridedArg emu_arg = arg;
    emu_arg.data = emu.data();
    std::vector<const void*> kernels;
    emulated(emu_arg, EmulatedLaunch{simt::Schedule::Lowest, grid_cap, &kernels});
    CHECK(kernels.size() == launches);
    CHECK(emu.bands_intact());
    CHECK(std::memcmp(emu.data(), out.data_ptr(), bytes) == 0);
  }
}

}  // namespace kiln::test
