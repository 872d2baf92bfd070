// Op table rows: scaled_dot_product_attention, checked against a float64 reference that builds the
// full score matrix (softmax(QK^T * scale + mask) V), including causal alignment when L != S,
// broadcast batches, q/k/v as views of one fused projection, and dropout's Philox mask.
#include <cmath>
#include <limits>

#include "core/cuda/runtime.h"
#include "kernels/attention.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

constexpr uint64_t kSeed = 20261123;  // the runner reseeds this before op and reference

struct RefOptions {
  bool causal = false;
  double dropout_p = 0.0;
};

// q [..., L, E], k [..., S, E], v [..., S, Ev], optional mask broadcastable to [..., L, S].
Tensor ref_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, RefOptions o) {
  Shape batch;
  for (const Tensor* t : {&q, &k, &v}) {
    Shape b(t->sizes().begin(), t->sizes().end() - 2);
    while (batch.size() < b.size()) batch.insert(batch.begin(), 1);
    for (size_t i = 0; i < b.size(); ++i) {
      size_t d = batch.size() - b.size() + i;
      if (batch[d] == 1) batch[d] = b[i];
    }
  }
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  std::vector<double> qv = values(q), kv = values(k), vv = values(v), mv;
  if (mask.defined()) mv = values(mask);
  // Index of a broadcast batch entry inside a tensor with batch dims `tb`.
  auto entry = [&](const Tensor& t, const Shape& bidx) {
    Shape tb(t.sizes().begin(), t.sizes().end() - 2);
    Shape sub(tb.size());
    for (size_t i = 0; i < tb.size(); ++i) sub[i] = tb[i] == 1 ? 0 : bidx[batch.size() - tb.size() + i];
    return ravel(sub, tb);
  };
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {L, Ev});
  std::vector<double> out;
  const int64_t nb = shape_numel(batch);
  for (int64_t b = 0; b < nb; ++b) {
    Shape bidx = unravel(b, batch);
    int64_t qe = entry(q, bidx), ke = entry(k, bidx), ve = entry(v, bidx);
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double acc = 0;
        for (int64_t e = 0; e < E; ++e) acc += qv[static_cast<size_t>((qe * L + i) * E + e)] * kv[static_cast<size_t>((ke * S + j) * E + e)];
        acc *= scale;
        if (o.causal && j > i) acc = -INFINITY;
        if (mask.defined()) {
          Shape full = bidx;
          full.push_back(i);
          full.push_back(j);
          const Shape& ms = mask.sizes();
          Shape sub(ms.size());
          for (size_t d = 0; d < ms.size(); ++d) sub[d] = ms[d] == 1 ? 0 : full[full.size() - ms.size() + d];
          double mval = mv[static_cast<size_t>(ravel(sub, ms))];
          if (mask.dtype() == DType::Bool) {
            if (mval == 0) acc = -INFINITY;
          } else {
            acc += mval;
          }
        }
        s[static_cast<size_t>(j)] = acc;
        m = std::max(m, acc);
      }
      double sum = 0;
      for (double& x : s) {
        x = std::exp(x - m);
        sum += x;
      }
      for (int64_t e = 0; e < Ev; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) {
          double p = s[static_cast<size_t>(j)] / sum;
          if (o.dropout_p > 0) {
            uint64_t idx = static_cast<uint64_t>((b * L + i) * S + j);
            p = attention_keep(PhiloxState{kSeed, 0}, idx, o.dropout_p) ? p / (1 - o.dropout_p) : 0.0;
          }
          acc += p * vv[static_cast<size_t>((ve * S + j) * Ev + e)];
        }
        out.push_back(acc);
      }
    }
  }
  return from_values(out, out_shape);
}

// q, k, v as head views of one fused projection [B, L, 3 * H * E] (last dim contiguous only).
TensorList fused_qkv(DType t, Device d) {
  const int64_t B = 2, L = 5, H = 2, E = 4;
  Tensor qkv = rnd({B, L, 3 * H * E}, t, d, 301);
  TensorList parts;
  for (int64_t p = 0; p < 3; ++p) {
    parts.push_back(qkv.narrow(2, p * H * E, H * E).view({B, L, H, E}).transpose(1, 2));
  }
  return parts;
}

OpRow sdpa_row(const std::string& name, RefOptions o) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.op = [o](const TensorList& x) {
    Tensor mask = x.size() > 3 ? x[3] : Tensor();
    return TensorList{scaled_dot_product_attention(x[0], x[1], x[2], mask, o.dropout_p, o.causal)};
  };
  r.reference = [o](const TensorList& x) {
    return TensorList{ref_attention(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor(), o)};
  };
  r.differentiable = {0, 1, 2};
  r.random = o.dropout_p > 0;
  // Low-precision inputs: the probabilities and the weighted sum are computed in float from
  // rounded inputs, and the output is rounded once; sums over S terms of products of rounded
  // values differ from the float64 reference by a few output ulps.
  r.tolerance[DType::Float16] = {2e-3, 2e-3};
  r.tolerance[DType::BFloat16] = {2e-2, 2e-2};
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

// Causal flash attention in bfloat16 at [B, H, L, E], on the tensor-core kernels (mma.sync's, or with `wgmma` the ones
// on Hopper's warpgroup mma, cases named *_wgmma, which a device other than compute capability 9.0 runs on mma.sync):
// the forward, or the forward and backward together. `variant` picks the wgmma forward for the A/Bs: the
// warp-specialized one with or without ping-pong (sdpa_causal_wgmma_nopingpong), with its producer and its output's
// stores on TMA or on cp.async and threads (sdpa_causal_wgmma_cpasync), its tiles staged with the 128-byte swizzle or
// by pieces (sdpa_causal_wgmma_pieces), or the one whose whole block loads (sdpa_causal_wgmma_sync); or with its blocks
// in order instead of longest first (sdpa_causal_wgmma_inorder), or longest first within each batch entry instead of in
// sections of entries (sdpa_causal_wgmma_perentry, AttentionArgs::order_section 1). And on either instruction, the
// fused backward (sdpa_causal_fwd_bwd_fused on mma.sync, sdpa_causal_wgmma_fwd_bwd_fused: one kernel and dQ summed with
// atomic adds, on wgmma with tensor reductions, against the two kernels of the rows without _fused), and on wgmma the
// fused backward with atomic adds (sdpa_causal_wgmma_fwd_bwd_fused_atomics, against the reductions of _fused). FLOPs as
// PyTorch's and FlashAttention's benchmarks count them: 4 B H L^2 E for the two forward products, halved for causal;
// the backward's five products are 2.5 times that. Bytes: q, k, v read and the output written (and, with backward,
// their gradients). PyTorch's peer runs the same op for both.
enum class Variant {
  kWarpSpecialized,
  kNoPingPong,
  kCpAsync,
  kSync,
  kPieces,
  kInOrder,
  kPerEntry,
  kFused,
  kFusedAtomics
};
BenchCase attention_bench(int64_t b, int64_t h, int64_t l, int64_t e, bool backward, bool wgmma = false,
                          Variant variant = Variant::kWarpSpecialized) {
  BenchCase c;
  c.op = backward ? "sdpa_causal_fwd_bwd" : "sdpa_causal";
  c.name = wgmma ? (backward ? "sdpa_causal_wgmma_fwd_bwd" : "sdpa_causal_wgmma") : c.op;
  if (variant == Variant::kNoPingPong) c.name += "_nopingpong";
  if (variant == Variant::kCpAsync) c.name += "_cpasync";
  if (variant == Variant::kSync) c.name += "_sync";
  if (variant == Variant::kPieces) c.name += "_pieces";
  if (variant == Variant::kInOrder) c.name += "_inorder";
  if (variant == Variant::kPerEntry) c.name += "_perentry";
  if (variant == Variant::kFused) c.name += "_fused";
  if (variant == Variant::kFusedAtomics) c.name += "_fused_atomics";
  c.dtypes = {DType::BFloat16};
  c.setup = [=](DType t, int64_t) {
    BenchSetup s;
    s.shape = {b, h, l, e};
    const Shape x = {b, h, l, e};
    s.inputs = {{x, t}, {x, t}, {x, t}};
    if (backward) s.inputs.push_back({x, t});  // the output's gradient
    const double n = static_cast<double>(b * h * l * e), size = static_cast<double>(element_size(t));
    s.bytes = (backward ? 8.0 : 4.0) * n * size;
    s.flops = (backward ? 3.5 : 1.0) * 4.0 * n * static_cast<double>(l) / 2.0;
    s.precision = "bf16";
    return s;
  };
  c.run = [backward, wgmma, variant](const TensorList& x) {
    const cuda::MathSwitches saved = cuda::math_switches();
    cuda::math_switches().attention_tensor_cores = true;
    cuda::math_switches().attention_wgmma = wgmma;
    cuda::math_switches().attention_wgmma_producer = variant != Variant::kSync;
    cuda::math_switches().attention_wgmma_pingpong = variant != Variant::kNoPingPong;
    cuda::math_switches().attention_wgmma_tma = variant != Variant::kCpAsync;
    cuda::math_switches().attention_wgmma_swizzle = variant != Variant::kPieces;
    cuda::math_switches().attention_longest_first = variant != Variant::kInOrder;
    cuda::math_switches().attention_order_section = variant == Variant::kPerEntry ? 1 : 0;
    const bool fused = variant == Variant::kFused || variant == Variant::kFusedAtomics;
    cuda::math_switches().attention_fused_backward = fused;
    cuda::math_switches().attention_wgmma_dq_reduce = variant != Variant::kFusedAtomics;
    TensorList out;
    if (!backward) {
      out = {scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, /*is_causal=*/true)};
    } else {
      Tensor q = x[0].detach().set_requires_grad(true), k = x[1].detach().set_requires_grad(true);
      Tensor v = x[2].detach().set_requires_grad(true);
      scaled_dot_product_attention(q, k, v, Tensor(), 0.0, /*is_causal=*/true).backward(x[3]);
      out = {q.grad(), k.grad(), v.grad()};
    }
    cuda::math_switches() = saved;
    return out;
  };
  return c;
}

}  // namespace

void add_attention_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = sdpa_row("sdpa", {});
    r.samples = {
        {"L=5 S=6 E=4 Ev=3",
         [](DType t, Device d) {
           return TensorList{rnd({2, 3, 5, 4}, t, d, 311), rnd({2, 3, 6, 4}, t, d, 312), rnd({2, 3, 6, 3}, t, d, 313)};
         }},
        {"broadcast batch",
         [](DType t, Device d) {
           return TensorList{rnd({2, 3, 4, 4}, t, d, 314), rnd({1, 3, 5, 4}, t, d, 315), rnd({3, 5, 2}, t, d, 316)};
         }},
        {"views of a fused qkv", fused_qkv},
        // q's last dim of size 1 may carry any stride: the output's last dim must stay innermost.
        {"E=1, q transposed",
         [](DType t, Device d) {
           return TensorList{rnd({2, 1, 5}, t, d, 354).transpose(1, 2), rnd({2, 6, 1}, t, d, 355),
                             rnd({2, 6, 3}, t, d, 356)};
         }},
        {"non-contiguous rows",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 4, 4}, t, d, 317)).contiguous().transpose(0, 1).transpose(0, 1),
                             rnd({3, 6, 4}, t, d, 318).transpose(1, 2).contiguous().transpose(1, 2),
                             rnd({3, 6, 5}, t, d, 319)};
         }},
        {"bool mask",
         [](DType t, Device d) {
           Tensor mask = rnd({5, 6}, DType::Bool, d, 320);
           mask.select(1, 0).fill_(true);  // every query sees at least one key
           return TensorList{rnd({2, 5, 4}, t, d, 321), rnd({2, 6, 4}, t, d, 322), rnd({2, 6, 3}, t, d, 323), mask};
         }},
        {"float mask",
         [](DType t, Device d) {
           return TensorList{rnd({2, 2, 5, 4}, t, d, 324), rnd({2, 2, 6, 4}, t, d, 325), rnd({2, 2, 6, 3}, t, d, 326),
                             rnd({2, 1, 5, 6}, t, d, 327)};
         }},
        // Past one block of query rows (the CPU kernel's 64, the CUDA kernel's tiles), with a tail.
        {"L=150 S=70 bool mask, three row blocks",
         [](DType t, Device d) {
           Tensor mask = rnd({150, 70}, DType::Bool, d, 328);
           mask.select(1, 3).fill_(true);
           return TensorList{rnd({2, 150, 8}, t, d, 329), rnd({2, 70, 8}, t, d, 330), rnd({2, 70, 5}, t, d, 344), mask};
         }},
    };
    r.errors = {
        {"embedding dims differ",
         [] { scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 6, 3}), zeros({2, 6, 3})); },
         {"scaled_dot_product_attention", "[2, 5, 4]", "[2, 6, 3]"}},
        {"key and value lengths differ",
         [] { scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 6, 4}), zeros({2, 7, 4})); },
         {"scaled_dot_product_attention", "6 vs 7"}},
        {"mask does not broadcast",
         [] {
           scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 6, 4}), zeros({2, 6, 4}),
                                        zeros({5, 5}, DType::Bool));
         },
         {"scaled_dot_product_attention", "[5, 5]", "[2, 5, 6]"}},
        {"dtype mismatch",
         [] { scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 6, 4}, DType::Float64), zeros({2, 6, 4})); },
         {"scaled_dot_product_attention", "float64"}},
        {"integer inputs",
         [] {
           scaled_dot_product_attention(zeros({2, 5, 4}, DType::Int64), zeros({2, 6, 4}, DType::Int64),
                                        zeros({2, 6, 4}, DType::Int64));
         },
         {"scaled_dot_product_attention", "int64"}},
        {"mask and causal together",
         [] {
           scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 5, 4}), zeros({2, 5, 4}), zeros({5, 5}, DType::Bool),
                                        0.0, true);
         },
         {"scaled_dot_product_attention", "is_causal"}},
        {"dropout out of range",
         [] { scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 5, 4}), zeros({2, 5, 4}), Tensor(), 1.0); },
         {"scaled_dot_product_attention", "dropout_p"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = sdpa_row("sdpa_causal", {true, 0.0});
    r.samples = {
        {"L=S=5", [](DType t, Device d) {
           return TensorList{rnd({2, 5, 4}, t, d, 331), rnd({2, 5, 4}, t, d, 332), rnd({2, 5, 3}, t, d, 333)};
         }},
        {"L=4 S=6 (top-left aligned)", [](DType t, Device d) {
           return TensorList{rnd({2, 4, 4}, t, d, 334), rnd({2, 6, 4}, t, d, 335), rnd({2, 6, 3}, t, d, 336)};
         }},
        {"L=6 S=4", [](DType t, Device d) {
           return TensorList{rnd({1, 6, 4}, t, d, 337), rnd({1, 4, 4}, t, d, 338), rnd({1, 4, 2}, t, d, 339)};
         }},
        {"views of a fused qkv", fused_qkv},
        // Row blocks that see different numbers of keys, tails included.
        {"L=S=150, three row blocks", [](DType t, Device d) {
           return TensorList{rnd({2, 150, 8}, t, d, 345), rnd({2, 150, 8}, t, d, 346), rnd({2, 150, 4}, t, d, 347)};
         }},
        {"L=130 S=90 (rows past S see every key)", [](DType t, Device d) {
           return TensorList{rnd({1, 130, 8}, t, d, 348), rnd({1, 90, 8}, t, d, 349), rnd({1, 90, 4}, t, d, 350)};
         }},
    };
    // The shapes of the speed goals: a long sequence at head dim 128, GPT-2 small's at head dim 64.
    r.bench = {attention_bench(4, 16, 4096, 128, false), attention_bench(4, 16, 4096, 128, true),
               attention_bench(8, 12, 1024, 64, false), attention_bench(8, 12, 1024, 64, true),
               attention_bench(4, 16, 4096, 128, false, true), attention_bench(4, 16, 4096, 128, true, true),
               attention_bench(8, 12, 1024, 64, false, true), attention_bench(8, 12, 1024, 64, true, true),
               attention_bench(4, 16, 4096, 128, false, true, Variant::kSync),
               attention_bench(8, 12, 1024, 64, false, true, Variant::kSync),
               attention_bench(4, 16, 4096, 128, false, true, Variant::kNoPingPong),
               attention_bench(8, 12, 1024, 64, false, true, Variant::kNoPingPong),
               attention_bench(4, 16, 4096, 128, false, true, Variant::kCpAsync),
               attention_bench(8, 12, 1024, 64, false, true, Variant::kCpAsync),
               attention_bench(4, 16, 4096, 128, false, true, Variant::kPieces),
               attention_bench(8, 12, 1024, 64, false, true, Variant::kPieces),
               attention_bench(4, 16, 4096, 128, false, true, Variant::kInOrder),
               attention_bench(8, 12, 1024, 64, false, true, Variant::kInOrder),
               attention_bench(4, 16, 4096, 128, true, true, Variant::kPerEntry),
               attention_bench(8, 12, 1024, 64, true, true, Variant::kPerEntry),
               attention_bench(4, 16, 4096, 128, true, true, Variant::kFused),
               attention_bench(8, 12, 1024, 64, true, true, Variant::kFused),
               attention_bench(4, 16, 4096, 128, true, false, Variant::kFused),
               attention_bench(8, 12, 1024, 64, true, false, Variant::kFused),
               attention_bench(4, 16, 4096, 128, true, true, Variant::kFusedAtomics),
               attention_bench(8, 12, 1024, 64, true, true, Variant::kFusedAtomics)};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = sdpa_row("sdpa_dropout", {false, 0.3});
    r.samples = {
        {"p=0.3", [](DType t, Device d) {
           return TensorList{rnd({2, 2, 5, 4}, t, d, 341), rnd({2, 2, 6, 4}, t, d, 342), rnd({2, 2, 6, 3}, t, d, 343)};
         }},
        {"p=0.3, L=100 S=80", [](DType t, Device d) {
           return TensorList{rnd({2, 100, 8}, t, d, 351), rnd({2, 80, 8}, t, d, 352), rnd({2, 80, 4}, t, d, 353)};
         }},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
