// The kernel of the tensor-core tile self-test: one warp stages A, K and V in shared memory, loads A,
// K^T and V as tiles (ldmatrix), runs the mma and stores the products, re-reads two C tiles as an A
// tile, and loads K^T as an A tile (tests/cuda/tile_selftest.h says what it computes). The GPU test
// launches it (tests/cuda/tile_selftest.cu), and the CPU test runs it on the emulator of
// kernels/simt/simt.h (tests/kernels/test_simt.cpp).
#pragma once

#include "kernels/cuda/tile.cuh"

namespace kiln::test {

// The operands in shared memory, where the tiles load from (ldmatrix): rows of 32 and 16 bytes.
template <typename T> struct alignas(16) TileSelftestOperands {
  T a[256], k[256], v[128];
};

template <typename T>
__global__ void tile_selftest_kernel(const T* a_in, const T* k_in, const T* v_in, float* s, float* av, float* sv,
                                     float* kt) {
  using namespace kiln::tile;
  KILN_SHARED(TileSelftestOperands<T>, in);
  const int lane = lane_id();
  for (int i = lane; i < 256; i += kWarp) {
    in.a[i] = a_in[i];
    in.k[i] = k_in[i];
    if (i < 128) in.v[i] = v_in[i];
  }
  __syncwarp();
  const T* const a = in.a;
  const T* const k = in.k;
  const T* const v = in.v;
  ATile<T> ta;
  BTile<T> k0, k1, tv;
  load_a(ta, a, 16);
  load_b_transposed(k0, k, 16);
  load_b_transposed(k1, k + 8 * 16, 16);
  load_b(tv, v, 8);
  CTile c0, c1, d_av, d_sv;
  fill(c0, 0.0f);
  fill(c1, 0.0f);
  fill(d_av, 0.0f);
  fill(d_sv, 0.0f);
  mma(c0, ta, k0);
  mma(c1, ta, k1);
  mma(d_av, ta, tv);
  store_c(c0, s, 16);
  store_c(c1, s + 8, 16);
  store_c(d_av, av, 8);
  ATile<T> p;
  a_from_c(p, c0, c1);
  mma(d_sv, p, tv);
  store_c(d_sv, sv, 8);
  // K^T A^T: K^T as the A operand (load_a_transposed), A^T as B (its rows 0-7 and 8-15).
  ATile<T> tk;
  BTile<T> a0, a1;
  load_a_transposed(tk, k, 16);
  load_b_transposed(a0, a, 16);
  load_b_transposed(a1, a + 8 * 16, 16);
  CTile t0, t1;
  fill(t0, 0.0f);
  fill(t1, 0.0f);
  mma(t0, tk, a0);
  mma(t1, tk, a1);
  store_c(t0, kt, 16);
  store_c(t1, kt + 8, 16);
}

}  // namespace kiln::test
