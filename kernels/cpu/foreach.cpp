// CPU reference of the multi-tensor kernels. The work list is every (tensor, chunk) pair in list
// order, spread over kiln's pool one chunk per task; a chunk is always computed by one thread in
// index order, and norm partials are combined in chunk order, so results do not depend on the
// number of threads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"
#include "kernels/foreach.h"

namespace kiln {
namespace {

using cpu::ld;
using cpu::st;

struct WorkItem {
  int64_t tensor, begin, end;
};

std::vector<WorkItem> chunk_items(const ForeachTensor* tensors, int64_t n) {
  std::vector<WorkItem> items;
  items.reserve(static_cast<size_t>(foreach_num_chunks(tensors, n)));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t numel = tensors[t].numel;
    for (int64_t b = 0; b < numel; b += kForeachChunk) items.push_back({t, b, std::min(numel, b + kForeachChunk)});
  }
  return items;
}

// Calls f(item_index, item) for every chunk of the list, one pool task per chunk.
template <typename F> void for_each_chunk(const ForeachTensor* tensors, int64_t n, F&& f) {
  const std::vector<WorkItem> items = chunk_items(tensors, n);
  cpu::parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i, items[static_cast<size_t>(i)]);
  });
}

// Calls f.template operator()<T>() for a floating dtype; anything else is a DTypeError.
template <typename F> void visit_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: f.template operator()<float>(); return;
    case DType::Float64: f.template operator()<double>(); return;
    case DType::Float16: f.template operator()<Half>(); return;
    case DType::BFloat16: f.template operator()<BFloat16>(); return;
    default: throw DTypeError(std::string(op) + ": expected a floating dtype, got " + dtype_name(t));
  }
}

// Calls f.template operator()<P, S>() for a parameter dtype P and a state dtype S (float32 or P).
template <typename F> void visit_param_state(DType param, DType state, const char* op, F&& f) {
  visit_floating(param, op, [&]<typename P>() {
    if (state == param) {
      f.template operator()<P, P>();
    } else if (state == DType::Float32) {
      f.template operator()<P, float>();
    } else {
      throw DTypeError(std::string(op) + ": optimizer state must be float32 or the parameter dtype " +
                       dtype_name(param) + ", got " + dtype_name(state));
    }
  });
}

// The optimizers' updates over one chunk's contiguous run, compiled for baseline x86-64 and for
// AVX2 (KILN_CPU_CLONES). The coefficients arrive by value and the arrays as restrict pointers, so
// no store can change a coefficient, and the choices that decide which arrays a loop reads or
// writes (a momentum buffer; unscaled gradients) are template arguments instead of tests in the
// loop: the float32 loops vectorize (and sqrt is an instruction: kernels/CMakeLists.txt). Each
// element goes through foreach_math's element function, the same IEEE operations in the same order
// as the CUDA kernels', so every clone gives the same bits.
template <bool UseBuf, typename P, typename S, typename C>
KILN_CPU_CLONES void sgd_run(P* __restrict p, const P* __restrict g, S* __restrict b, int64_t len,
                             foreach_math::SgdCoef<C> k) {
  if constexpr (UseBuf) k.has_momentum = true;  // as the caller's use_buf says
  for (int64_t i = 0; i < len; ++i) {
    C pv = ld<P, C>(p, i);
    // The first step overwrites the buffer without reading it (it may hold anything).
    C bv = UseBuf && !k.first ? ld<S, C>(b, i) : C(0);
    foreach_math::sgd_element<C>(pv, ld<P, C>(g, i), &bv, k);
    st<P, C>(p, i, pv);
    if constexpr (UseBuf) st<S, C>(b, i, bv);
  }
}

// Amsgrad reads and writes a third state array (the running maximum); without it `vm` is unused.
template <bool Scaled, bool Ams, typename P, typename S, typename C>
KILN_CPU_CLONES void adam_run(P* __restrict p, const P* __restrict g, S* __restrict m, S* __restrict v,
                              S* __restrict vm, int64_t len, foreach_math::AdamCoef<C> k) {
  k.has_scale = Scaled;
  k.amsgrad = Ams;
  for (int64_t i = 0; i < len; ++i) {
    C pv = ld<P, C>(p, i), mv = ld<S, C>(m, i), vv = ld<S, C>(v, i);
    C xv = Ams ? ld<S, C>(vm, i) : C(0);
    foreach_math::adam_element<C>(pv, ld<P, C>(g, i), mv, vv, xv, k);
    st<P, C>(p, i, pv);
    st<S, C>(m, i, mv);
    st<S, C>(v, i, vv);
    if constexpr (Ams) st<S, C>(vm, i, xv);
  }
}

// Tensor t's step count (see sgd_step_cpu).
float step_of(const ForeachTensor* steps, int64_t t) { return *static_cast<const float*>(steps[t].data); }

}  // namespace

int64_t foreach_num_chunks(const ForeachTensor* tensors, int64_t n) {
  int64_t chunks = 0;
  for (int64_t t = 0; t < n; ++t) chunks += (tensors[t].numel + kForeachChunk - 1) / kForeachChunk;
  return chunks;
}

void sgd_step_cpu(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* bufs,
                  const ForeachTensor* steps, int64_t n, DType param_dtype, DType state_dtype, const SgdHyper& h,
                  const ForeachScalars& s, const KernelContext&) {
  if (n == 0 || foreach_math::skip_update(s)) return;
  visit_param_state(param_dtype, state_dtype, "foreach_sgd_", [&]<typename P, typename S>() {
    using C = cpu::acc_t<P>;
    const bool use_buf = h.momentum != 0.0 && bufs != nullptr;
    for_each_chunk(params, n, [&](int64_t, const WorkItem& w) {
      const foreach_math::SgdCoef<C> k = foreach_math::sgd_coef<C>(h, s, step_of(steps, w.tensor));
      P* p = static_cast<P*>(params[w.tensor].data) + w.begin;
      const P* g = static_cast<const P*>(grads[w.tensor].data) + w.begin;
      const int64_t len = w.end - w.begin;
      if (use_buf) {
        sgd_run<true>(p, g, static_cast<S*>(bufs[w.tensor].data) + w.begin, len, k);
      } else {
        sgd_run<false>(p, g, static_cast<S*>(nullptr), len, k);
      }
    });
  });
}

void adam_step_cpu(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* exp_avgs,
                   const ForeachTensor* exp_avg_sqs, const ForeachTensor* max_exp_avg_sqs, const ForeachTensor* steps,
                   int64_t n, DType param_dtype, DType state_dtype, const AdamHyper& h, const ForeachScalars& s,
                   const KernelContext&) {
  if (n == 0 || foreach_math::skip_update(s)) return;
  const bool ams = h.amsgrad && max_exp_avg_sqs != nullptr;
  visit_param_state(param_dtype, state_dtype, "foreach_adam_", [&]<typename P, typename S>() {
    using C = cpu::acc_t<P>;
    for_each_chunk(params, n, [&](int64_t, const WorkItem& w) {
      const foreach_math::AdamCoef<C> k = foreach_math::adam_coef<C>(h, s, step_of(steps, w.tensor));
      P* p = static_cast<P*>(params[w.tensor].data) + w.begin;
      const P* g = static_cast<const P*>(grads[w.tensor].data) + w.begin;
      S* m = static_cast<S*>(exp_avgs[w.tensor].data) + w.begin;
      S* v = static_cast<S*>(exp_avg_sqs[w.tensor].data) + w.begin;
      S* vm = ams ? static_cast<S*>(max_exp_avg_sqs[w.tensor].data) + w.begin : nullptr;
      const int64_t len = w.end - w.begin;
      if (k.has_scale) {
        ams ? adam_run<true, true>(p, g, m, v, vm, len, k) : adam_run<true, false>(p, g, m, v, vm, len, k);
      } else {
        ams ? adam_run<false, true>(p, g, m, v, vm, len, k) : adam_run<false, false>(p, g, m, v, vm, len, k);
      }
    });
  });
}

void foreach_norm_partials_cpu(double* partials, const ForeachTensor* tensors, int64_t n, DType dtype, double p,
                               const KernelContext&) {
  const bool inf = std::isinf(p);
  visit_floating(dtype, "foreach_norm", [&]<typename T>() {
    using A = cpu::acc_t<T>;
    const A pa = static_cast<A>(p);
    for_each_chunk(tensors, n, [&](int64_t idx, const WorkItem& w) {
      const T* x = static_cast<const T*>(tensors[w.tensor].data);
      A acc = 0;
      if (inf) {
        for (int64_t i = w.begin; i < w.end; ++i) {
          const A a = std::abs(ld<T, A>(x, i));
          if (a > acc || std::isnan(a)) acc = a;
          if (std::isnan(acc)) break;
        }
      } else if (p == 2.0) {
        for (int64_t i = w.begin; i < w.end; ++i) {
          const A a = ld<T, A>(x, i);
          acc += a * a;
        }
      } else if (p == 1.0) {
        for (int64_t i = w.begin; i < w.end; ++i) acc += std::abs(ld<T, A>(x, i));
      } else {
        for (int64_t i = w.begin; i < w.end; ++i) acc += std::pow(std::abs(ld<T, A>(x, i)), pa);
      }
      partials[idx] = static_cast<double>(acc);
    });
  });
}

void foreach_norm_finish_cpu(void* out, DType out_dtype, const double* partials, int64_t count, double p,
                             const KernelContext&) {
  double acc = 0;
  if (std::isinf(p)) {
    for (int64_t k = 0; k < count; ++k) {
      const double a = partials[k];
      if (a > acc || std::isnan(a)) acc = a;
      if (std::isnan(acc)) break;
    }
  } else {
    for (int64_t k = 0; k < count; ++k) acc += partials[k];
    acc = p == 1.0 ? acc : p == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / p);
  }
  if (out_dtype == DType::Float64) {
    *static_cast<double*>(out) = acc;
  } else {
    *static_cast<float*>(out) = static_cast<float>(acc);
  }
}

void foreach_mul_scalar_cpu(const ForeachTensor* tensors, int64_t n, DType dtype, const void* scalar,
                            DType scalar_dtype, const KernelContext&) {
  if (n == 0) return;
  const double factor = scalar_dtype == DType::Float64 ? *static_cast<const double*>(scalar)
                                                       : static_cast<double>(*static_cast<const float*>(scalar));
  visit_floating(dtype, "foreach_mul_", [&]<typename T>() {
    using C = cpu::acc_t<T>;
    const C v = static_cast<C>(factor);
    for_each_chunk(tensors, n, [&](int64_t, const WorkItem& w) {
      T* x = static_cast<T*>(tensors[w.tensor].data);
      for (int64_t i = w.begin; i < w.end; ++i) st<T, C>(x, i, ld<T, C>(x, i) * v);
    });
  });
}

void foreach_add_scalar_cpu(const ForeachTensor* tensors, int64_t n, DType dtype, double value, const float* found_inf,
                            const KernelContext&) {
  if (n == 0 || (found_inf != nullptr && *found_inf != 0.0f)) return;
  visit_floating(dtype, "foreach_add_scalar_", [&]<typename T>() {
    using C = cpu::acc_t<T>;
    const C v = static_cast<C>(value);
    for_each_chunk(tensors, n, [&](int64_t, const WorkItem& w) {
      T* x = static_cast<T*>(tensors[w.tensor].data);
      for (int64_t i = w.begin; i < w.end; ++i) st<T, C>(x, i, ld<T, C>(x, i) + v);
    });
  });
}

void foreach_zero_cpu(const ForeachTensor* tensors, int64_t n, size_t element_size, const KernelContext&) {
  for_each_chunk(tensors, n, [&](int64_t, const WorkItem& w) {
    char* base = static_cast<char*>(tensors[w.tensor].data);
    std::memset(base + static_cast<size_t>(w.begin) * element_size, 0,
                static_cast<size_t>(w.end - w.begin) * element_size);
  });
}

void foreach_non_finite_check_and_unscale_cpu(const ForeachTensor* tensors, int64_t n, DType dtype, float* found_inf,
                                              const float* inv_scale, const KernelContext&) {
  if (n == 0) return;
  visit_floating(dtype, "foreach_non_finite_check_and_unscale_", [&]<typename T>() {
    using C = cpu::acc_t<T>;
    const C inv = inv_scale != nullptr ? static_cast<C>(*inv_scale) : C(1);
    for_each_chunk(tensors, n, [&](int64_t, const WorkItem& w) {
      T* x = static_cast<T*>(tensors[w.tensor].data);
      bool bad = false;
      if (inv_scale != nullptr) {
        for (int64_t i = w.begin; i < w.end; ++i) {
          const C v = ld<T, C>(x, i);
          bad |= !std::isfinite(v);
          st<T, C>(x, i, v * inv);
        }
      } else {
        for (int64_t i = w.begin; i < w.end; ++i) bad |= !std::isfinite(ld<T, C>(x, i));
      }
      // Several chunks may find a bad value at once; they all store the same 1, but two threads
      // writing one float is still a race in C++ unless the store is atomic.
      if (bad) std::atomic_ref<float>(*found_inf).store(1.0f, std::memory_order_relaxed);
    });
  });
}

void amp_update_scale_cpu(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                          double backoff_factor, int32_t growth_interval, const KernelContext&) {
  foreach_math::amp_update_scale(*scale, *growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

}  // namespace kiln
