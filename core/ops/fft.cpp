// The discrete Fourier transforms of core/ops/fft.h, written in kiln's ops (docs/fft.md).
//
// The work is done by three raw transforms on rows (no autograd, autocast off, products in full
// FP32): c2c_rows ([B, n, 2] -> [B, n, 2], either sign), r2c_rows ([B, n] -> [B, n/2 + 1, 2]) and
// c2r_rows ([B, n/2 + 1, 2] -> [B, n]). Each public op moves its dim to the rows, calls one of them
// and records a node whose backward calls the adjoint one. Lengths are split as
//   n <= kDenseMax          one product with the DFT matrix (as a real [2n, 2n] matrix),
//   n = n1 * n2             four-step Cooley-Tukey: j = n2 j1 + j2, k = k1 + n1 k2, so
//                           X[k1 + n1 k2] = sum_j2 w_n^(j2 k1) w_n2^(j2 k2) S(j2, k1) with
//                           S(j2, k1) = sum_j1 x[n2 j1 + j2] w_n1^(j1 k1),
//   n prime                 Bluestein: j k = (j^2 + k^2 - (k - j)^2) / 2 turns the transform into
//                           a convolution with the chirp exp(i pi t^2 / n), done at a power of two.
#include "core/ops/fft.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <numbers>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/fft_common.h"
#include "core/ops/helpers.h"
#include "core/ops/matmul.h"
#include "core/ops/shape.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {

using fft_detail::cmul;
using fft_detail::conj;
using fft_detail::im_of;
using fft_detail::pair;
using fft_detail::re_of;

namespace {

// The longest transform done as one product with its DFT matrix: 4n multiply-adds per complex
// point there, against about 8 sqrt(n) and six more passes over the data for a four-step split.
constexpr int64_t kDenseMax = 64;

// --- the constant cache -------------------------------------------------------------------------

enum class Const : uint8_t {
  C2C,          // [2n, 2n]: interleaved (re, im) rows times it give the transform's, interleaved
  R2C,          // [n, 2 (n/2 + 1)]
  C2R,          // [2 (n/2 + 1), n]
  Twiddle,      // [n2, n1, 2]: w_n^(j2 k1), m = n1
  PackR2C,      // [n/2 + 1, 2]: -i w_n^k / 2, for rfft of even n from the half-length transform
  PackC2R,      // [n/2, 2]: i w_n^-k, for irfft of even n
  Chirp,        // [n, 2]: exp(-+ i pi t^2 / n)
  ChirpFilter,  // [m, 2]: the transform of the conjugate chirp wrapped to length m, over m
  RealEnds,     // [n/2 + 1, 2]: ones but for the imaginary parts of frequencies 0 and n/2
  Weights,      // [n/2 + 1, 1]: hermitian_weight of each frequency, or (inverse) its reciprocal
};

struct ConstKey {
  Const kind;
  int64_t n, m;
  bool inverse;
  DType dtype;
  Device device;
  bool operator<(const ConstKey& o) const {
    return std::tie(kind, n, m, inverse, dtype, device.type, device.index) <
           std::tie(o.kind, o.n, o.m, o.inverse, o.dtype, o.device.type, o.device.index);
  }
};

// Never destroyed, so no CUDA tensor outlives the runtime at exit. Never emptied but by
// fft_cache_clear: a captured CUDA graph reads its tensors.
std::mutex& cache_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<ConstKey, Tensor>& cache() {
  static auto* c = new std::map<ConstKey, Tensor>;
  return *c;
}
// The tensor `key` names, built on first use from `build` (host float64 values of `shape`).
Tensor cached(const ConstKey& key, const Shape& shape, const std::function<std::vector<double>()>& build) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  // Built outside the lock: a chirp filter is computed by a transform, which reads the cache.
  Tensor t = tensor(build(), shape, TensorOptions(DType::Float64)).to(key.device, key.dtype);
  std::lock_guard<std::mutex> lock(cache_mutex());
  return cache().emplace(key, t).first->second;  // another thread's, if it came first
}

// cos and sin of 2 pi r / n, with the quarter turns exact.
std::pair<double, double> unit_root(int64_t r, int64_t n) {
  r %= n;
  if (r < 0) r += n;
  if ((4 * r) % n == 0) {
    static constexpr double c[4] = {1, 0, -1, 0}, s[4] = {0, 1, 0, -1};
    const int64_t q = 4 * r / n;
    return {c[q], s[q]};
  }
  const long double a = 2 * std::numbers::pi_v<long double> * static_cast<long double>(r) / static_cast<long double>(n);
  return {static_cast<double>(std::cos(a)), static_cast<double>(std::sin(a))};
}

// The sign of the exponent: -1 for the forward transform, +1 for the inverse.
double sign_of(bool inverse) { return inverse ? 1.0 : -1.0; }

Tensor c2c_matrix(int64_t n, bool inverse, DType dtype, Device device) {
  return cached({Const::C2C, n, 0, inverse, dtype, device}, {2 * n, 2 * n}, [n, inverse] {
    // Row 2j (2j + 1) holds what re (im) of x_j adds to each X_k: X_k += x_j (c + i sign s).
    std::vector<double> w(static_cast<size_t>(4 * n * n));
    const double sg = sign_of(inverse);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) {
        const auto [c, s] = unit_root(j * k % n, n);
        const size_t re = static_cast<size_t>(2 * j * 2 * n + 2 * k), im = re + static_cast<size_t>(2 * n);
        w[re] = c;
        w[re + 1] = sg * s;
        w[im] = -sg * s;
        w[im + 1] = c;
      }
    }
    return w;
  });
}

Tensor r2c_matrix(int64_t n, DType dtype, Device device) {
  const int64_t f = n / 2 + 1;
  return cached({Const::R2C, n, 0, false, dtype, device}, {n, 2 * f}, [n, f] {
    std::vector<double> w(static_cast<size_t>(n * 2 * f));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < f; ++k) {
        const auto [c, s] = unit_root(j * k % n, n);
        w[static_cast<size_t>(j * 2 * f + 2 * k)] = c;
        w[static_cast<size_t>(j * 2 * f + 2 * k + 1)] = -s;
      }
    }
    return w;
  });
}

// Frequency k's weight in a real signal's spectrum: 1 for 0 and n/2 (their own conjugates), else 2.
double hermitian_weight(int64_t k, int64_t n) { return k == 0 || 2 * k == n ? 1.0 : 2.0; }

Tensor c2r_matrix(int64_t n, DType dtype, Device device) {
  const int64_t f = n / 2 + 1;
  return cached({Const::C2R, n, 0, false, dtype, device}, {2 * f, n}, [n, f] {
    // x_j = sum_k weight_k (re_k cos - im_k sin); the imaginary rows of 0 and n/2 stay 0.
    std::vector<double> w(static_cast<size_t>(2 * f * n), 0.0);
    for (int64_t k = 0; k < f; ++k) {
      const double h = hermitian_weight(k, n);
      for (int64_t j = 0; j < n; ++j) {
        const auto [c, s] = unit_root(j * k % n, n);
        w[static_cast<size_t>(2 * k * n + j)] = h * c;
        if (h == 2.0) w[static_cast<size_t>((2 * k + 1) * n + j)] = -h * s;
      }
    }
    return w;
  });
}

Tensor twiddles(int64_t n1, int64_t n2, bool inverse, DType dtype, Device device) {
  const int64_t n = n1 * n2;
  return cached({Const::Twiddle, n, n1, inverse, dtype, device}, {n2, n1, 2}, [n1, n2, n, inverse] {
    std::vector<double> w;
    w.reserve(static_cast<size_t>(2 * n));
    for (int64_t j2 = 0; j2 < n2; ++j2) {
      for (int64_t k1 = 0; k1 < n1; ++k1) {
        const auto [c, s] = unit_root(j2 * k1 % n, n);
        w.push_back(c);
        w.push_back(sign_of(inverse) * s);
      }
    }
    return w;
  });
}

// x cut to, or padded with zeros to, `len` along dim d.
Tensor resized(const Tensor& x, int64_t d, int64_t len) {
  const int64_t have = x.size(d);
  if (have == len) return x;
  if (have > len) return x.narrow(d, 0, len);
  Shape extra = x.sizes();
  extra[static_cast<size_t>(d)] = len - have;
  return cat({x, zeros(extra, TensorOptions(x.dtype(), x.device()))}, d);
}

// --- the raw transforms -------------------------------------------------------------------------

Tensor c2c_rows(const Tensor& x, int64_t n, bool inverse);

// n1 <= n2 with n1 * n2 = n and n1 the largest divisor up to sqrt(n) (1 for a prime).
int64_t smaller_factor(int64_t n) {
  int64_t best = 1;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) best = d;
  }
  return best;
}

Tensor bluestein_rows(const Tensor& x, int64_t n, bool inverse) {
  int64_t m = 1;
  while (m < 2 * n - 1) m *= 2;
  const DType dt = x.dtype();
  const Device dev = x.device();
  const auto chirp_values = [n, inverse] {
    std::vector<double> w;
    w.reserve(static_cast<size_t>(2 * n));
    for (int64_t t = 0; t < n; ++t) {
      const auto [c, s] = unit_root(t * t % (2 * n), 2 * n);  // pi t^2 / n, reduced exactly
      w.push_back(c);
      w.push_back(sign_of(inverse) * s);
    }
    return w;
  };
  const Tensor chirp = cached({Const::Chirp, n, 0, inverse, dt, dev}, {n, 2}, chirp_values);
  const Tensor filter = cached({Const::ChirpFilter, n, m, inverse, dt, dev}, {m, 2}, [n, m, &chirp_values] {
    // The conjugate chirp at offsets -(n - 1)..(n - 1), wrapped to length m, transformed (float64).
    const std::vector<double> w = chirp_values();
    std::vector<double> v(static_cast<size_t>(2 * m), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t at : {t, (m - t) % m}) {
        v[static_cast<size_t>(2 * at)] = w[static_cast<size_t>(2 * t)];
        v[static_cast<size_t>(2 * at + 1)] = -w[static_cast<size_t>(2 * t + 1)];
      }
    }
    const Tensor f = c2c_rows(tensor(v, {1, m, 2}, TensorOptions(DType::Float64)), m, false);
    std::vector<double> out = f.to_vector_double();
    for (double& e : out) e /= static_cast<double>(m);
    return out;
  });
  Tensor a = cmul(x, chirp);
  a = c2c_rows(cmul(c2c_rows(resized(a, 1, m), m, false), filter), m, true);
  return cmul(a.narrow(1, 0, n), chirp).contiguous();
}

// x [B, n, 2] contiguous -> its transform [B, n, 2], unnormalized.
Tensor c2c_rows(const Tensor& x, int64_t n, bool inverse) {
  const int64_t b = x.size(0);
  if (n == 1 || x.numel() == 0) return x;
  if (n <= kDenseMax) {
    return matmul(x.reshape({b, 2 * n}), c2c_matrix(n, inverse, x.dtype(), x.device())).reshape({b, n, 2});
  }
  const int64_t n1 = smaller_factor(n), n2 = n / n1;
  if (n1 == 1) return bluestein_rows(x, n, inverse);
  Tensor a = x.reshape({b, n1, n2, 2}).transpose(1, 2).contiguous();  // [b, j2, j1]
  a = c2c_rows(a.reshape({b * n2, n1, 2}), n1, inverse).reshape({b, n2, n1, 2});
  a = cmul(a, twiddles(n1, n2, inverse, x.dtype(), x.device()));
  a = a.transpose(1, 2).contiguous();  // [b, k1, j2]
  a = c2c_rows(a.reshape({b * n1, n2, 2}), n2, inverse).reshape({b, n1, n2, 2});
  return a.transpose(1, 2).contiguous().reshape({b, n, 2});  // k = k1 + n1 k2
}

// x [B, n] contiguous real -> its first n/2 + 1 frequencies [B, n/2 + 1, 2], unnormalized.
Tensor r2c_rows(const Tensor& x, int64_t n) {
  const int64_t b = x.size(0), f = n / 2 + 1;
  const TensorOptions o(x.dtype(), x.device());
  if (x.numel() == 0) return zeros({b, f, 2}, o);
  if (n <= kDenseMax) return matmul(x, r2c_matrix(n, x.dtype(), x.device())).reshape({b, f, 2});
  if (n % 2 != 0) return c2c_rows(pair(x, zeros({b, n}, o)), n, false).narrow(1, 0, f).contiguous();
  // Even n: z_t = x_2t + i x_2t+1 is x's own memory. With Z its transform (length h = n/2, Z_h =
  // Z_0) and Q_k = conj(Z_(h-k)): X_k = (Z_k + Q_k) / 2 + (-i w_n^k / 2) (Z_k - Q_k).
  const int64_t h = n / 2;
  const Tensor z = c2c_rows(x.reshape({b, h, 2}), h, false);
  const Tensor p = cat({z, z.narrow(1, 0, 1)}, 1);
  const Tensor q = conj(flip(p, {1}));
  const Tensor u = cached({Const::PackR2C, n, 0, false, x.dtype(), x.device()}, {f, 2}, [n, f] {
    std::vector<double> w;
    for (int64_t k = 0; k < f; ++k) {
      const auto [c, s] = unit_root(k, n);  // -i (c - i s) / 2 = (-s - i c) / 2
      w.push_back(-s / 2);
      w.push_back(-c / 2);
    }
    return w;
  });
  return add(mul(add(p, q), 0.5), cmul(sub(p, q), u)).contiguous();
}

// z [B, n/2 + 1, 2] contiguous -> the real signal [B, n] whose spectrum's first half it is,
// unnormalized (n times irfft's); the imaginary parts of 0 and n/2 are not read.
Tensor c2r_rows(const Tensor& z, int64_t n) {
  const int64_t b = z.size(0), h = n / 2;
  const TensorOptions o(z.dtype(), z.device());
  if (z.numel() == 0) return zeros({b, n}, o);
  if (n <= kDenseMax) return matmul(z.reshape({b, 2 * (h + 1)}), c2r_matrix(n, z.dtype(), z.device()));
  if (n % 2 != 0) {  // the whole Hermitian spectrum, then the real part of its inverse
    const Tensor full = cat({z, conj(flip(z.narrow(1, 1, h), {1}))}, 1).contiguous();
    return re_of(c2c_rows(full, n, true)).contiguous();
  }
  // Even n: Z_k = (P_k + Q_k) + i w_n^-k (P_k - Q_k), k < h, with P = z (imaginary parts of 0 and h
  // zeroed) and Q_k = conj(P_(h-k)), is n / h times the half-length transform of x_2t + i x_2t+1.
  const Tensor keep = cached({Const::RealEnds, n, 0, false, z.dtype(), z.device()}, {h + 1, 2}, [h] {
    std::vector<double> k(static_cast<size_t>(2 * (h + 1)), 1.0);
    k[1] = k[static_cast<size_t>(2 * h + 1)] = 0.0;
    return k;
  });
  const Tensor p = mul(z, keep);
  const Tensor q = conj(flip(p, {1})).narrow(1, 0, h);
  const Tensor s = cached({Const::PackC2R, n, 0, true, z.dtype(), z.device()}, {h, 2}, [n, h] {
    std::vector<double> w;
    for (int64_t k = 0; k < h; ++k) {
      const auto [c, sn] = unit_root(k, n);  // i (c + i s) = -s + i c
      w.push_back(-sn);
      w.push_back(c);
    }
    return w;
  });
  const Tensor pk = p.narrow(1, 0, h);
  const Tensor zz = add(add(pk, q), cmul(sub(pk, q), s)).contiguous();
  return c2c_rows(zz, h, true).reshape({b, n});
}

// --- moving a dim to the rows -------------------------------------------------------------------

// Raw scope: no tape, autocast off on both device types (a CUDA transform's chirp filter is
// computed on the CPU), full FP32 products.
struct Raw {
  NoGradGuard no_grad;
  AutocastSnapshotGuard no_autocast{AutocastSnapshot{}};
  FullFloat32MatmulGuard fp32;
};

enum class Kind : uint8_t { C2C, R2C, C2R };

// Applies the raw transform `kind` of length n along `dim` (complex dims for C2C and C2R inputs).
Tensor along(const Tensor& x, int64_t dim, Kind kind, int64_t n, bool inverse) {
  Raw raw;
  const bool complex_in = kind != Kind::R2C, complex_out = kind != Kind::C2R;
  const int64_t last = x.dim() - (complex_in ? 2 : 1);
  Tensor m = movedim(x, dim, last);
  Shape batch(m.sizes().begin(), m.sizes().begin() + last);
  int64_t rows = 1;
  for (int64_t s : batch) rows *= s;
  const int64_t len = m.size(last);
  Tensor flat = complex_in ? m.contiguous().reshape({rows, len, 2}) : m.contiguous().reshape({rows, len});
  Tensor out;
  switch (kind) {
    case Kind::C2C: out = c2c_rows(flat, n, inverse); break;
    case Kind::R2C: out = r2c_rows(flat, n); break;
    case Kind::C2R: out = c2r_rows(flat, n); break;
  }
  Shape shape = batch;
  shape.push_back(out.size(1));
  if (complex_out) shape.push_back(2);
  // A tensor of its own, not a view taken here without grad (whose in-place changes the autograd
  // engine could not follow): one more pass over the output.
  const Tensor r = movedim(out.reshape(shape), last, dim);
  return r.is_contiguous() ? r.clone() : r.contiguous();
}

// The weights of the rfft/irfft adjoints, [n/2 + 1, 1]: hermitian_weight, or its reciprocal.
Tensor hermitian_weights(int64_t n, bool reciprocal, const Tensor& like) {
  return cached({Const::Weights, n, 0, reciprocal, like.dtype(), like.device()}, {n / 2 + 1, 1}, [n, reciprocal] {
    std::vector<double> w;
    for (int64_t k = 0; k <= n / 2; ++k) w.push_back(reciprocal ? 1 / hermitian_weight(k, n) : hermitian_weight(k, n));
    return w;
  });
}

// The complex g [..., n/2 + 1 at complex dim d, ..., 2] times w [n/2 + 1, 1] along that dim.
Tensor weigh(const Tensor& g, int64_t d, const Tensor& w) {
  Raw raw;
  return movedim(mul(movedim(g, d, g.dim() - 2), w), g.dim() - 2, d);
}

// One transform with its node (backward: the adjoint transform). x is already n (or n/2 + 1) long.
Tensor transform(const char* op, const Tensor& x, int64_t d, Kind kind, int64_t n, bool inverse) {
  Tensor out = along(x, d, kind, n, inverse);
  if (needs_grad({&x})) {
    record_function(op, {x}, {out}, {}, [d, kind, n, inverse](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      switch (kind) {
        case Kind::C2C: return TensorList{along(g, d, Kind::C2C, n, !inverse)};
        // sum_k Re(g_k w^-jk) over the half spectrum: irfft's sum with its weights undone.
        case Kind::R2C: return TensorList{along(weigh(g, d, hermitian_weights(n, true, g)), d, Kind::C2R, n, false)};
        // x_j = sum_k weight_k Re(X_k w^-jk), so dL/dX_k = weight_k rfft(dL/dx)_k.
        case Kind::C2R: return TensorList{weigh(along(g, d, Kind::R2C, n, false), d, hermitian_weights(n, false, g))};
      }
      return TensorList{Tensor()};
    });
  }
  return out;
}

// --- checks and sizes ---------------------------------------------------------------------------

double scale_of(const char* op, const std::string& norm, double n, bool inverse) {
  if (norm == "ortho") return 1.0 / std::sqrt(n);
  if (norm == "backward") return inverse ? 1.0 / n : 1.0;
  if (norm == "forward") return inverse ? 1.0 : 1.0 / n;
  throw Error(std::string(op) + ": norm must be \"backward\", \"ortho\" or \"forward\", got \"" + norm + "\"");
}

Tensor scaled(const Tensor& x, double s) { return s == 1.0 ? x : mul(x, s); }

void check_length(const char* op, int64_t n, const char* what, const Tensor& x, int64_t d) {
  if (n < 1) {
    throw Error(std::string(op) + ": " + what + " must be positive, got " + std::to_string(n) + " (dim " +
                std::to_string(d) + " of input shape " + shape_str(x.sizes()) + ")");
  }
}

}  // namespace

namespace fft_detail {

void check_input(const char* op, const Tensor& x, bool complex, bool needs_dim) {
  ops::check_defined(op, x, "input");
  if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64) {
    throw DTypeError(std::string(op) + ": the input must be float32 or float64, got " + ops::dtype_str(x.dtype()) +
                     (is_floating(x.dtype()) ? " (cast it to float32)" : ""));
  }
  if (complex) check_pair_dim(op, x, "input");
  if (needs_dim && x.dim() < (complex ? 2 : 1)) {
    throw ShapeError(std::string(op) + ": the input has no dim to transform (shape " + shape_str(x.sizes()) +
                     (complex ? ", a 0-d complex tensor)" : ")"));
  }
}

void check_pair_dim(const char* op, const Tensor& z, const char* what) {
  if (z.dim() < 1 || z.size(-1) != 2) {
    throw ShapeError(std::string(op) + ": the " + what +
                     " is complex, a real tensor whose last dim of 2 holds (real, imaginary), got shape " +
                     shape_str(z.sizes()));
  }
}

int64_t complex_dim(const char* op, const Tensor& z, int64_t dim) {
  const int64_t nd = z.dim() - 1;
  if (dim < -nd || dim >= nd) {
    throw IndexError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for a complex input with " +
                     std::to_string(nd) + " complex dims (shape " + shape_str(z.sizes()) + " with its pair dim)");
  }
  return dim < 0 ? dim + nd : dim;
}

}  // namespace fft_detail

using fft_detail::check_input;
using fft_detail::complex_dim;

namespace {

Tensor c2c_op(const char* op, const Tensor& z, std::optional<int64_t> n, int64_t dim, const std::string& norm,
              bool inverse) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&z})) return c2c_op(op, (*c)[0], n, dim, norm, inverse);
  check_input(op, z, true);
  const int64_t d = complex_dim(op, z, dim);
  const int64_t len = n.value_or(z.size(d));
  check_length(op, len, n ? "n" : "the transformed dim's size", z, d);
  const double s = scale_of(op, norm, static_cast<double>(len), inverse);
  return scaled(transform(op, resized(z, d, len), d, Kind::C2C, len, inverse), s);
}

Tensor r2c_op(const char* op, const Tensor& x, std::optional<int64_t> n, int64_t dim, const std::string& norm,
              bool inverse) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x})) return r2c_op(op, (*c)[0], n, dim, norm, inverse);
  check_input(op, x, false);
  const int64_t d = ops::checked_dim(op, x, dim);
  const int64_t len = n.value_or(x.size(d));
  check_length(op, len, n ? "n" : "the transformed dim's size", x, d);
  const double s = scale_of(op, norm, static_cast<double>(len), inverse);
  return scaled(transform(op, resized(x, d, len), d, Kind::R2C, len, false), s);
}

Tensor c2r_op(const char* op, const Tensor& z, std::optional<int64_t> n, int64_t dim, const std::string& norm,
              bool inverse) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&z})) return c2r_op(op, (*c)[0], n, dim, norm, inverse);
  check_input(op, z, true);
  const int64_t d = complex_dim(op, z, dim);
  const int64_t len = n.value_or(2 * (z.size(d) - 1));
  check_length(op, len, n ? "the output length n" : "the output length 2 * (m - 1)", z, d);
  const double s = scale_of(op, norm, static_cast<double>(len), inverse);
  return scaled(transform(op, resized(z, d, len / 2 + 1), d, Kind::C2R, len, false), s);
}

}  // namespace

Tensor fft(const Tensor& z, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2c_op("fft", z, n, dim, norm, false);
}
Tensor ifft(const Tensor& z, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2c_op("ifft", z, n, dim, norm, true);
}
Tensor rfft(const Tensor& x, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return r2c_op("rfft", x, n, dim, norm, false);
}
Tensor irfft(const Tensor& z, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2r_op("irfft", z, n, dim, norm, true);
}
Tensor hfft(const Tensor& z, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  if (std::optional<TensorList> c = autocast::cast_inputs("hfft", {&z})) return hfft((*c)[0], n, dim, norm);
  check_input("hfft", z, true);
  return c2r_op("hfft", conj(z), n, dim, norm, false);
}
Tensor ihfft(const Tensor& x, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return conj(r2c_op("ihfft", x, n, dim, norm, true));
}

// --- several dims -------------------------------------------------------------------------------

namespace {

// The dims (wrapped, distinct) and lengths of an n-d transform over `dims_of` dims (the complex
// dims of a complex input, all of a real one). For irfftn the last length is the output's.
struct Plan {
  Shape dims, lengths;
};

Plan plan_of(const char* op, const Tensor& x, int64_t dims_of, const std::optional<Shape>& s,
             const std::optional<Shape>& dim, bool c2r_last, bool allow_none = false) {
  Plan p;
  if (dim) {
    for (int64_t d : *dim) {
      if (d < -dims_of || d >= dims_of) {
        throw IndexError(std::string(op) + ": dim " + std::to_string(d) + " is out of range for " +
                         std::to_string(dims_of) + " transformable dims (shape " + shape_str(x.sizes()) + ")");
      }
      p.dims.push_back(d < 0 ? d + dims_of : d);
    }
    if (s && s->size() != dim->size()) {
      throw ShapeError(std::string(op) + ": s has " + std::to_string(s->size()) + " entries but dim has " +
                       std::to_string(dim->size()));
    }
  } else if (s) {
    if (static_cast<int64_t>(s->size()) > dims_of) {
      throw ShapeError(std::string(op) + ": s has " + std::to_string(s->size()) + " entries, more than the " +
                       std::to_string(dims_of) + " transformable dims of shape " + shape_str(x.sizes()));
    }
    for (int64_t d = dims_of - static_cast<int64_t>(s->size()); d < dims_of; ++d) p.dims.push_back(d);
  } else {
    for (int64_t d = 0; d < dims_of; ++d) p.dims.push_back(d);
  }
  Shape sorted = p.dims;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw Error(std::string(op) + ": dim lists a dim twice: " + shape_str(dim.value_or(Shape{})));
  }
  if (p.dims.empty() && !allow_none) {
    throw Error(std::string(op) + ": must transform at least one dim, got none (shape " + shape_str(x.sizes()) + ")");
  }
  for (size_t i = 0; i < p.dims.size(); ++i) {
    const int64_t have = x.size(p.dims[i]);
    const bool last = c2r_last && i + 1 == p.dims.size();
    const bool given = s && (*s)[i] != -1;
    const int64_t len = given ? (*s)[i] : (last ? 2 * (have - 1) : have);
    check_length(op, len, given || !last ? "each transform length" : "the output length 2 * (m - 1)", x, p.dims[i]);
    p.lengths.push_back(len);
  }
  return p;
}

// x with every dim of the plan that is longer than the transform reads cut first (views), so no
// transform works on values a later dim's cut drops; the padding waits for each dim's own turn.
// With c2r_last the last dim is read to its n / 2 + 1 points.
Tensor cut_to_plan(Tensor x, const Plan& p, bool c2r_last) {
  for (size_t i = 0; i < p.dims.size(); ++i) {
    const int64_t len = c2r_last && i + 1 == p.dims.size() ? p.lengths[i] / 2 + 1 : p.lengths[i];
    if (x.size(p.dims[i]) > len) x = x.narrow(p.dims[i], 0, len);
  }
  return x;
}

double total(const Shape& lengths) {
  double t = 1;
  for (int64_t l : lengths) t *= static_cast<double>(l);
  return t;
}

Tensor c2c_n(const char* op, const Tensor& z, const std::optional<Shape>& s, const std::optional<Shape>& dim,
             const std::string& norm, bool inverse) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&z})) return c2c_n(op, (*c)[0], s, dim, norm, inverse);
  check_input(op, z, true, false);
  const Plan p = plan_of(op, z, z.dim() - 1, s, dim, false, true);
  const double sc = scale_of(op, norm, total(p.lengths), inverse);
  if (p.dims.empty()) return z.clone();  // the transform over no dims is the identity, as PyTorch's
  Tensor out = cut_to_plan(z, p, false);
  for (size_t i = 0; i < p.dims.size(); ++i) {
    out = transform(op, resized(out, p.dims[i], p.lengths[i]), p.dims[i], Kind::C2C, p.lengths[i], inverse);
  }
  return scaled(out, sc);
}

}  // namespace

Tensor fftn(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dim, const std::string& norm) {
  return c2c_n("fftn", z, s, dim, norm, false);
}
Tensor ifftn(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dim, const std::string& norm) {
  return c2c_n("ifftn", z, s, dim, norm, true);
}
namespace {

// rfftn, or with `inverse` the same with the inverse's scaling (ihfftn conjugates it).
Tensor r2c_n(const char* op, const Tensor& x, const std::optional<Shape>& s, const std::optional<Shape>& dim,
             const std::string& norm, bool inverse) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x})) return r2c_n(op, (*c)[0], s, dim, norm, inverse);
  check_input(op, x, false);
  const Plan p = plan_of(op, x, x.dim(), s, dim, false);
  const double sc = scale_of(op, norm, total(p.lengths), inverse);
  const size_t last = p.dims.size() - 1;
  const Tensor cut = cut_to_plan(x, p, false);
  Tensor out =
      transform(op, resized(cut, p.dims[last], p.lengths[last]), p.dims[last], Kind::R2C, p.lengths[last], false);
  for (size_t i = 0; i < last; ++i) {
    out = transform(op, resized(out, p.dims[i], p.lengths[i]), p.dims[i], Kind::C2C, p.lengths[i], false);
  }
  return scaled(out, sc);
}

// irfftn; or hfftn, with `hermitian`: the forward complex transforms over all but the last dim,
// then the conjugate's real inverse over the last, with the forward transform's scaling. The
// inverse transforms of conj(z) are the conjugates of the forward ones of z, so hfftn runs this on
// conj(z).
Tensor c2r_n(const char* op, const Tensor& z, const std::optional<Shape>& s, const std::optional<Shape>& dim,
             const std::string& norm, bool hermitian) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&z})) return c2r_n(op, (*c)[0], s, dim, norm, hermitian);
  check_input(op, z, true);
  const Plan p = plan_of(op, z, z.dim() - 1, s, dim, true);
  const double sc = scale_of(op, norm, total(p.lengths), !hermitian);
  const size_t last = p.dims.size() - 1;
  Tensor out = cut_to_plan(z, p, true);
  if (hermitian) out = conj(out);
  for (size_t i = 0; i < last; ++i) {
    out = transform(op, resized(out, p.dims[i], p.lengths[i]), p.dims[i], Kind::C2C, p.lengths[i], true);
  }
  const int64_t n = p.lengths[last];
  return scaled(transform(op, resized(out, p.dims[last], n / 2 + 1), p.dims[last], Kind::C2R, n, false), sc);
}
}  // namespace

Tensor rfftn(const Tensor& x, std::optional<Shape> s, std::optional<Shape> dim, const std::string& norm) {
  return r2c_n("rfftn", x, s, dim, norm, false);
}
Tensor irfftn(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dim, const std::string& norm) {
  return c2r_n("irfftn", z, s, dim, norm, false);
}
Tensor fft2(const Tensor& z, std::optional<Shape> s, const Shape& dim, const std::string& norm) {
  return c2c_n("fft2", z, s, dim, norm, false);
}
Tensor ifft2(const Tensor& z, std::optional<Shape> s, const Shape& dim, const std::string& norm) {
  return c2c_n("ifft2", z, s, dim, norm, true);
}
Tensor rfft2(const Tensor& x, std::optional<Shape> s, const Shape& dim, const std::string& norm) {
  return r2c_n("rfft2", x, s, dim, norm, false);
}
Tensor irfft2(const Tensor& z, std::optional<Shape> s, const Shape& dim, const std::string& norm) {
  return c2r_n("irfft2", z, s, dim, norm, false);
}
Tensor hfftn(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dim, const std::string& norm) {
  return c2r_n("hfftn", z, s, dim, norm, true);
}
Tensor ihfftn(const Tensor& x, std::optional<Shape> s, std::optional<Shape> dim, const std::string& norm) {
  return conj(r2c_n("ihfftn", x, s, dim, norm, true));
}
Tensor hfft2(const Tensor& z, std::optional<Shape> s, const Shape& dim, const std::string& norm) {
  return c2r_n("hfft2", z, s, dim, norm, true);
}
Tensor ihfft2(const Tensor& x, std::optional<Shape> s, const Shape& dim, const std::string& norm) {
  return conj(r2c_n("ihfft2", x, s, dim, norm, true));
}

size_t fft_cache_size() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return cache().size();
}
void fft_cache_clear() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache().clear();
}

}  // namespace kiln
