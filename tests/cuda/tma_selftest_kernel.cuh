// The kernels of the TMA self-test (tests/cuda/tma_selftest.h). The copy's: thread 0 sets up a
// barrier, names the box's bytes with its arrival and starts the tensor copy; every thread waits for
// the phase, then copies the landed tile out. The write's: the block stages the tile in shared memory
// and fences it for the async proxy; thread 0 starts the store or the reduction and waits for it. The GPU
// test launches them (tests/cuda/tma_selftest.cu, built for sm_90a), and the CPU test runs them on the
// emulator (tests/kernels/test_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/pipeline.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/tile_layout.h"
#include "tests/cuda/tma_selftest.h"

namespace kiln::test {

// The dynamic shared memory: the barrier, and the tile of `elems` 16-bit values where a tensor copy
// may land (on 1024 bytes, as a swizzled one must).
struct TmaSelftestSmem {
  uint64_t* bar;
  uint16_t* tile;
  KILN_HD TmaSelftestSmem(tile::SmemCarver& c, int elems)
      : bar(c.take<uint64_t>(1, sizeof(uint64_t))), tile(c.take<uint16_t>(elems, 1024)) {}
};

__global__ void tma_selftest_kernel(const __grid_constant__ tma::Map map, const TmaAt at, uint32_t bytes,
                                    uint16_t* out) {
  tile::SmemCarver carve(cuda_detail::dynamic_smem());
  const int elems = static_cast<int>(bytes / 2);
  const TmaSelftestSmem smem(carve, elems);
  if (threadIdx.x == 0) {
    pipeline::mbarrier_init(smem.bar, 1);
    pipeline::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pipeline::mbarrier_arrive_expect_tx(smem.bar, bytes);
    tma::copy_box(smem.tile, map, at.at, smem.bar);
  }
  pipeline::mbarrier_wait(smem.bar, 0);
  for (int i = static_cast<int>(threadIdx.x); i < elems; i += static_cast<int>(blockDim.x)) out[i] = smem.tile[i];
}

// `elems` floats of the staged tile (tma_write_source), on 1024 bytes.
struct TmaWriteSmem {
  float* tile;
  KILN_HD TmaWriteSmem(tile::SmemCarver& c, int elems) : tile(c.take<float>(elems, 1024)) {}
};

__global__ void tma_write_selftest_kernel(const __grid_constant__ tma::Map map, const TmaAt at, const float* source,
                                          int elems, bool add) {
  tile::SmemCarver carve(cuda_detail::dynamic_smem());
  const TmaWriteSmem smem(carve, elems);
  for (int i = static_cast<int>(threadIdx.x); i < elems; i += static_cast<int>(blockDim.x)) smem.tile[i] = source[i];
  wgmma::fence_async_smem();
  __syncthreads();
  if (threadIdx.x == 0) {
    if (add) tma::reduce_add_box(map, at.at, smem.tile);
    else tma::store_box(map, at.at, smem.tile);
    tma::commit_bulk();
    tma::wait_bulk<0>();
  }
}

}  // namespace kiln::test
