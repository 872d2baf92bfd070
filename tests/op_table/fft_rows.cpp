// Op table rows of the fft family (core/ops/fft.h): fft, ifft, rfft, irfft, hfft and ihfft over one
// dim at lengths on each of the transform's paths (1, the dense products up to 64, four-step
// composites such as 96 = 8 x 12 and 130, Bluestein's primes 67 and 131), along the last, a middle
// and the first dim, on strided inputs (the (re, im) pair itself strided, and a transposed batch),
// with n cutting and padding, in the three norms; fft2, ifft2, fftn, ifftn with s and dim (and over
// no dim), rfft2, rfftn, irfft2, irfftn, hfft2, hfftn, ihfft2 and ihfftn; fftfreq and rfftfreq at
// odd and even n; fftshift and ifftshift; stft (centred with reflect and constant padding, not
// centred, a window shorter than n_fft, one- and two-sided, normalized, the defaults) and istft
// (the same, with `length` cutting and padding); and the complex helpers. A complex tensor of shape
// S is the real S + [2].
//
// The references are plain long double loops: the DFT by its definition, O(n^2), each root of unity
// e^(+-2 pi i m / n) taken with m = (j k) mod n so that no angle grows past 2 pi; the inverse real
// transforms through the Hermitian extension of the half spectrum (the imaginary parts of frequency
// 0 and, for even n, n / 2 dropped, as PyTorch's c2r transforms drop them); stft by explicit frames
// over a reflect- or zero-padded signal; istft by explicit overlap-add of the frames' inverse
// transforms and division by the sum of the squared windows.
//
// A transform's parameters travel with each sample as a trailing int64 tensor (the runner never
// converts integer inputs), so one row covers many lengths, dims and norms. Norms are numbered
// 0 backward, 1 ortho, 2 forward; an n or s entry of 0 means the default (nullopt).
#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>
#include <optional>
#include <utility>

#include "core/ops/fft.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

using Real = long double;
using Cx = std::complex<Real>;
constexpr Real kPi = std::numbers::pi_v<Real>;
constexpr const char* kNorms[] = {"backward", "ortho", "forward"};

std::string norm_name(int64_t norm) { return kNorms[at(norm)]; }
std::optional<int64_t> opt(int64_t n) { return n > 0 ? std::optional<int64_t>(n) : std::nullopt; }

// A complex array of shape s (without the pair dim), row-major.
struct CArr {
  Shape s;
  std::vector<Cx> v;
};

// z [S..., 2] as complex values of shape S.
CArr complex_of(const Tensor& z) {
  const Values v = values(z);
  CArr a{Shape(z.sizes().begin(), z.sizes().end() - 1), {}};
  for (size_t i = 0; i + 1 < v.size(); i += 2) a.v.emplace_back(v[i], v[i + 1]);
  return a;
}

// A real x of shape S as complex values with imaginary parts 0.
CArr real_of(const Tensor& x) {
  CArr a{x.sizes(), {}};
  for (double e : values(x)) a.v.emplace_back(e, 0);
  return a;
}

// As a float64 tensor S + [2].
Tensor pairs(const CArr& a) {
  Values out;
  for (const Cx& c : a.v) {
    out.push_back(static_cast<double>(c.real()));
    out.push_back(static_cast<double>(c.imag()));
  }
  Shape s = a.s;
  s.push_back(2);
  return from_values(out, s);
}

// The real parts, a float64 tensor of shape S.
Tensor reals(const CArr& a) {
  Values out;
  for (const Cx& c : a.v) out.push_back(static_cast<double>(c.real()));
  return from_values(out, a.s);
}

CArr conj(CArr a) {
  for (Cx& c : a.v) c = std::conj(c);
  return a;
}

// The positions before `dim` (outer), its size, and the positions after it (inner).
struct Axis {
  int64_t outer, size, inner;
};
Axis axis(const Shape& s, int64_t dim) {
  Axis x{1, s[at(dim)], 1};
  for (int64_t i = 0; i < dim; ++i) x.outer *= s[at(i)];
  for (size_t i = at(dim) + 1; i < s.size(); ++i) x.inner *= s[i];
  return x;
}

// a with `dim` cut or padded with zeros to n.
CArr resized(const CArr& a, int64_t dim, int64_t n) {
  const Axis x = axis(a.s, dim);
  CArr r{a.s, {}};
  r.s[at(dim)] = n;
  r.v.assign(at(x.outer * n * x.inner), Cx(0));
  for (int64_t o = 0; o < x.outer; ++o)
    for (int64_t j = 0; j < std::min(n, x.size); ++j)
      for (int64_t i = 0; i < x.inner; ++i)
        r.v[at((o * n + j) * x.inner + i)] = a.v[at((o * x.size + j) * x.inner + i)];
  return r;
}

// e^(sign 2 pi i m / n), m reduced to [0, n) before the angle is formed.
Cx root(int64_t m, int64_t n, int sign) {
  const int64_t r = ((m % n) + n) % n;
  const Real angle = 2 * kPi * static_cast<Real>(r) / static_cast<Real>(n);
  return {std::cos(angle), sign * std::sin(angle)};
}

// The DFT along dim (n = its size) by definition: r_k = scale sum_j a_j e^(sign 2 pi i j k / n).
CArr dft(const CArr& a, int64_t dim, int sign, Real scale) {
  const Axis x = axis(a.s, dim);
  const int64_t n = x.size;
  std::vector<Cx> roots;
  for (int64_t m = 0; m < n; ++m) roots.push_back(root(m, n, sign));
  CArr r{a.s, std::vector<Cx>(a.v.size())};
  for (int64_t o = 0; o < x.outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < x.inner; ++i) {
        Cx sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += a.v[at((o * n + j) * x.inner + i)] * roots[at((j * k) % n)];
        r.v[at((o * n + k) * x.inner + i)] = scale * sum;
      }
  return r;
}

// The length-n spectrum along dim whose first n / 2 + 1 values are a's (cut or padded to them) and
// whose others are their mirrored conjugates, X_k = conj(X_{n-k}); the imaginary parts of X_0 and,
// for even n, X_{n/2} are dropped (a real signal's are 0, and the transform does not read them).
CArr hermitian(const CArr& a, int64_t dim, int64_t n) {
  const int64_t half = n / 2 + 1;
  const CArr h = resized(a, dim, half);
  const Axis x = axis(h.s, dim);
  CArr r{h.s, {}};
  r.s[at(dim)] = n;
  r.v.assign(at(x.outer * n * x.inner), Cx(0));
  for (int64_t o = 0; o < x.outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < x.inner; ++i) {
        Cx v = k < half ? h.v[at((o * half + k) * x.inner + i)] : std::conj(h.v[at((o * half + n - k) * x.inner + i)]);
        if (k == 0 || 2 * k == n) v = Cx(v.real(), 0);
        r.v[at((o * n + k) * x.inner + i)] = v;
      }
  return r;
}

// The scale of a forward (or inverse) transform of length n under the norm.
Real scale_of(int64_t norm, int64_t n, bool forward) {
  if (norm == 1) return 1 / std::sqrt(static_cast<Real>(n));
  // backward: the inverse divides; forward: the forward does
  const bool divides = (norm == 0) != forward;
  return divides ? 1 / static_cast<Real>(n) : 1;
}

// fft (sign -1) or ifft (sign +1) of z along dim, cut or padded to n (0: its size).
Tensor c2c_ref(const Tensor& z, int64_t n, int64_t dim, int64_t norm, int sign) {
  CArr a = complex_of(z);
  const int64_t d = wrap(dim, static_cast<int64_t>(a.s.size()));
  const int64_t len = n > 0 ? n : a.s[at(d)];
  return pairs(dft(resized(a, d, len), d, sign, scale_of(norm, len, sign < 0)));
}

// rfft of the real x along dim (n / 2 + 1 frequencies), or ihfft: its conjugate, inverse's scale.
Tensor r2c_ref(const Tensor& x, int64_t n, int64_t dim, int64_t norm, bool ihfft) {
  CArr a = real_of(x);
  const int64_t d = wrap(dim, x.dim());
  const int64_t len = n > 0 ? n : a.s[at(d)];
  CArr f = resized(dft(resized(a, d, len), d, -1, scale_of(norm, len, !ihfft)), d, len / 2 + 1);
  return pairs(ihfft ? conj(f) : f);
}

// irfft of z along dim: the real signal of length n (0: 2 (m - 1)) from the Hermitian extension;
// or hfft: the same of conj(z) with the forward transform's scale.
Tensor c2r_ref(const Tensor& z, int64_t n, int64_t dim, int64_t norm, bool hfft) {
  CArr a = complex_of(z);
  const int64_t d = wrap(dim, static_cast<int64_t>(a.s.size()));
  const int64_t len = n > 0 ? n : 2 * (a.s[at(d)] - 1);
  if (hfft) a = conj(a);
  return reals(dft(hermitian(a, d, len), d, +1, scale_of(norm, len, hfft)));
}

// How a sample's input is laid out: contiguous, strided along its last dim (for a complex input,
// the (re, im) pair itself: noncontig), or its first two dims transposed.
enum class Layout { Contiguous, Strided, Transposed };

// One input of `shape` (a complex one ends in 2), drawn from seed, and the int64 parameters p.
Sample input_sample(std::string name, Shape shape, std::vector<int64_t> p, uint64_t seed,
                    Layout layout = Layout::Contiguous) {
  return {std::move(name), [=](DType t, Device d) {
            Tensor x;
            if (layout == Layout::Strided) {
              x = noncontig(rnd(shape, t, d, seed));
            } else if (layout == Layout::Transposed) {
              Shape s = shape;
              std::swap(s[0], s[1]);
              x = rnd(s, t, d, seed).transpose(0, 1);
            } else {
              x = rnd(shape, t, d, seed);
            }
            return TensorList{x, params(p, d)};
          }};
}

// float32: each output is a sum of n products of unit normals, n <= 131 here, so its size is about
// sqrt(2 n) < 17; the transforms' passes (two for four-step, about six for Bluestein's chirps and
// convolution) each round at float32's 6e-8 relative to that size: a few 1e-6 at most. atol 1e-4
// leaves a margin over that, and is still five orders under a wrong twiddle, sign or scale.
void transform_tolerance(OpRow& r) { r.tolerance[DType::Float32] = {1e-4, 1e-5}; }

using Transform = Tensor (*)(const Tensor&, std::optional<int64_t>, int64_t, const std::string&);
using TransformRef = std::function<Tensor(const Tensor&, int64_t n, int64_t dim, int64_t norm)>;

// The errors every one-dim transform shares; `complex_in`: its input is a (re, im) pair tensor.
std::vector<ErrorCase> transform_errors(const std::string& name, Transform op, bool complex_in) {
  const Shape good = complex_in ? Shape{4, 8, 2} : Shape{4, 8};
  std::vector<ErrorCase> e = {
      // Over S = [4, 8] for a complex input: 2 is past the last dim even though the tensor has 3.
      {"dim 2 of a 2-d (complex) input", [=] { op(zeros(good), std::nullopt, 2, "backward"); }, {name, "dim", "2"}},
      {"dim -3 of a 2-d (complex) input", [=] { op(zeros(good), std::nullopt, -3, "backward"); }, {name, "dim", "-3"}},
      {"n = 0", [=] { op(zeros(good), 0, -1, "backward"); }, {name, "0"}},
      {"negative n", [=] { op(zeros(good), -3, -1, "backward"); }, {name, "-3"}},
      {"an unknown norm", [=] { op(zeros(good), std::nullopt, -1, "sideways"); }, {name, "norm", "sideways"}},
      {"float16 input", [=] { op(zeros(good, DType::Float16), std::nullopt, -1, "backward"); }, {name, "float16"}},
      {"bfloat16 input", [=] { op(zeros(good, DType::BFloat16), std::nullopt, -1, "backward"); }, {name, "bfloat16"}},
      {"int64 input", [=] { op(zeros(good, DType::Int64), std::nullopt, -1, "backward"); }, {name, "int64"}},
      undefined_input(name, [op](const Tensor& t) { return op(t, std::nullopt, -1, "backward"); }),
  };
  if (complex_in) {
    e.push_back({"a last dim of 3, not a (re, im) pair",
                 [=] {
                   op(zeros({4, 3}), std::nullopt, -1, "backward");
                 },
                 {name, "2"}});
    e.push_back({"a 1-d [2]: a 0-d complex tensor has no dim to transform",
                 [=] { op(zeros({2}), std::nullopt, -1, "backward"); },
                 {name}});
  }
  return e;
}

// A row of transforms: float32 and float64, input 0 differentiable, the transforms' tolerance.
OpRow transform_row_of(const std::string& name, std::vector<Sample> samples, ListFn op, ListFn ref,
                       std::vector<ErrorCase> errors) {
  OpRow r;
  r.name = name;
  r.dtypes = {DType::Float32, DType::Float64};
  r.samples = std::move(samples);
  r.op = std::move(op);
  r.reference = std::move(ref);
  r.differentiable = {0};
  r.errors = std::move(errors);
  r.out_dtype = same_dtype;
  transform_tolerance(r);
  return r;
}

// A row of one one-dim transform: input 0 transformed with input 1's parameters (n, dim, norm).
OpRow transform_row(const std::string& name, std::vector<Sample> samples, Transform op, TransformRef ref,
                    std::vector<ErrorCase> errors) {
  return transform_row_of(
      name, std::move(samples),
      [op](const TensorList& x) {
        const std::vector<int64_t> p = param_values(x[1]);
        return TensorList{op(x[0], opt(p[0]), p[1], norm_name(p[2]))};
      },
      [ref](const TensorList& x) {
        const std::vector<int64_t> p = param_values(x[1]);
        return TensorList{ref(x[0], p[0], p[1], p[2])};
      },
      std::move(errors));
}

void add_complex_transforms(std::vector<OpRow>& rows) {
  // fft: every path, with big lengths only in small batches (gradcheck perturbs every element).
  rows.push_back(transform_row(
      "fft",
      {input_sample("length 1 [3, 1]", {3, 1, 2}, {0, -1, 0}, 7101),
       input_sample("length 5 [2, 5] ortho", {2, 5, 2}, {0, -1, 1}, 7102),
       input_sample("length 8 [4, 8] forward", {4, 8, 2}, {0, -1, 2}, 7103),
       input_sample("length 64 (one product) [2, 64]", {2, 64, 2}, {0, -1, 0}, 7104),
       input_sample("length 96 (four-step 8 x 12) [96]", {96, 2}, {0, -1, 0}, 7105),
       input_sample("length 67 (prime: Bluestein) [67] ortho", {67, 2}, {0, -1, 1}, 7106),
       input_sample("length 130 (2 x 65) [130] forward", {130, 2}, {0, -1, 2}, 7107),
       input_sample("middle dim of [3, 8, 4]", {3, 8, 4, 2}, {0, 1, 0}, 7108),
       input_sample("dim -2 of [2, 12, 3] ortho", {2, 12, 3, 2}, {0, -2, 1}, 7109),
       input_sample("dim 0 of [70, 2] (2 x 5 x 7)", {70, 2, 2}, {0, 0, 0}, 7110),
       input_sample("non-contiguous (re, im) pairs [4, 6]", {4, 6, 2}, {0, -1, 0}, 7111, Layout::Strided),
       input_sample("transposed [5, 3] over dim 0", {5, 3, 2}, {0, 0, 2}, 7112, Layout::Transposed),
       input_sample("n = 6 cuts 10", {2, 10, 2}, {6, -1, 0}, 7113),
       input_sample("n = 12 pads 5 ortho", {3, 5, 2}, {12, -1, 1}, 7114),
       input_sample("n = 72 pads 50 (four-step) forward", {50, 2}, {72, -1, 2}, 7115),
       input_sample("n = 67 pads 40 (Bluestein) on dim 0", {40, 2, 2}, {67, 0, 0}, 7116)},
      kiln::fft, [](const Tensor& z, int64_t n, int64_t dim, int64_t norm) { return c2c_ref(z, n, dim, norm, -1); },
      transform_errors("fft", kiln::fft, true)));
  rows.push_back(transform_row(
      "ifft",
      {input_sample("length 1 [2, 1]", {2, 1, 2}, {0, -1, 0}, 7121),
       input_sample("length 7 [3, 7] ortho", {3, 7, 2}, {0, -1, 1}, 7122),
       input_sample("length 64 [2, 64] forward", {2, 64, 2}, {0, -1, 2}, 7123),
       input_sample("length 96 (four-step) [96]", {96, 2}, {0, -1, 0}, 7124),
       input_sample("length 67 (Bluestein) [67]", {67, 2}, {0, -1, 0}, 7125),
       input_sample("length 130 [130] ortho", {130, 2}, {0, -1, 1}, 7126),
       input_sample("middle dim of [2, 9, 3] forward", {2, 9, 3, 2}, {0, 1, 2}, 7127),
       input_sample("non-contiguous (re, im) pairs [3, 10]", {3, 10, 2}, {0, -1, 0}, 7128, Layout::Strided),
       input_sample("n = 4 cuts 9", {2, 9, 2}, {4, -1, 0}, 7129),
       input_sample("n = 16 pads 11 ortho", {2, 11, 2}, {16, -1, 1}, 7130)},
      kiln::ifft, [](const Tensor& z, int64_t n, int64_t dim, int64_t norm) { return c2c_ref(z, n, dim, norm, +1); },
      transform_errors("ifft", kiln::ifft, true)));
}

void add_real_transforms(std::vector<OpRow>& rows) {
  rows.push_back(transform_row(
      "rfft",
      {input_sample("length 1 [3, 1]", {3, 1}, {0, -1, 0}, 7141),
       input_sample("length 2 [3, 2]", {3, 2}, {0, -1, 0}, 7142),
       input_sample("length 7 [4, 7] ortho", {4, 7}, {0, -1, 1}, 7143),
       input_sample("length 8 [4, 8] forward", {4, 8}, {0, -1, 2}, 7144),
       input_sample("length 64 [2, 64]", {2, 64}, {0, -1, 0}, 7145),
       input_sample("length 100 [2, 100]", {2, 100}, {0, -1, 0}, 7146),
       input_sample("length 67 (Bluestein) [2, 67] ortho", {2, 67}, {0, -1, 1}, 7147),
       input_sample("length 128 [128]", {128}, {0, -1, 0}, 7148),
       input_sample("length 130 [130] forward", {130}, {0, -1, 2}, 7149),
       input_sample("middle dim of [3, 10, 4]", {3, 10, 4}, {0, 1, 0}, 7150),
       input_sample("dim 0 of [9, 5]", {9, 5}, {0, 0, 1}, 7151),
       input_sample("non-contiguous [3, 12]", {3, 12}, {0, -1, 0}, 7152, Layout::Strided),
       input_sample("transposed [6, 4] over dim 0", {6, 4}, {0, 0, 0}, 7153, Layout::Transposed),
       input_sample("n = 6 cuts 11", {2, 11}, {6, -1, 0}, 7154),
       input_sample("n = 15 pads 9 forward", {2, 9}, {15, -1, 2}, 7155)},
      kiln::rfft, [](const Tensor& x, int64_t n, int64_t dim, int64_t norm) { return r2c_ref(x, n, dim, norm, false); },
      transform_errors("rfft", kiln::rfft, false)));
  // irfft: m input points give 2 (m - 1) by default; an odd n reads (n + 1) / 2 of them.
  {
    OpRow r = transform_row(
        "irfft",
        {input_sample("one point, n = 1", {3, 1, 2}, {1, -1, 0}, 7161),
         input_sample("2 points: n = 2", {3, 2, 2}, {0, -1, 0}, 7162),
         input_sample("5 points: n = 8 ortho", {4, 5, 2}, {0, -1, 1}, 7163),
         input_sample("5 points, odd n = 9 forward", {4, 5, 2}, {9, -1, 2}, 7164),
         input_sample("33 points: n = 64", {2, 33, 2}, {0, -1, 0}, 7165),
         input_sample("34 points, odd n = 67 (Bluestein)", {34, 2}, {67, -1, 0}, 7166),
         input_sample("51 points: n = 100 ortho", {51, 2}, {0, -1, 1}, 7167),
         input_sample("65 points: n = 128", {65, 2}, {0, -1, 0}, 7168),
         input_sample("66 points: n = 130 forward", {66, 2}, {0, -1, 2}, 7169),
         input_sample("66 points, odd n = 131 (prime)", {66, 2}, {131, -1, 0}, 7170),
         input_sample("3 points padded for n = 10", {2, 3, 2}, {10, -1, 0}, 7171),
         input_sample("9 points cut for n = 6", {2, 9, 2}, {6, -1, 0}, 7172),
         input_sample("middle dim of [2, 6, 3]", {2, 6, 3, 2}, {0, 1, 0}, 7173),
         input_sample("non-contiguous (re, im) pairs [3, 7]", {3, 7, 2}, {0, -1, 0}, 7174, Layout::Strided)},
        kiln::irfft,
        [](const Tensor& z, int64_t n, int64_t dim, int64_t norm) { return c2r_ref(z, n, dim, norm, false); },
        transform_errors("irfft", kiln::irfft, true));
    r.errors.push_back({"one point: the default n = 2 (1 - 1) = 0 outputs",
                        [] {
                          irfft(zeros({4, 1, 2}));
                        },
                        {"irfft", "0"}});
    rows.push_back(std::move(r));
  }
  {
    OpRow r = transform_row(
        "hfft",
        {input_sample("5 points: n = 8", {3, 5, 2}, {0, -1, 0}, 7181),
         input_sample("5 points, odd n = 9 ortho", {3, 5, 2}, {9, -1, 1}, 7182),
         input_sample("34 points, n = 67 (Bluestein) forward", {34, 2}, {67, -1, 2}, 7183),
         input_sample("51 points: n = 100", {51, 2}, {0, -1, 0}, 7184),
         input_sample("middle dim of [2, 4, 3] forward", {2, 4, 3, 2}, {0, 1, 2}, 7185),
         input_sample("non-contiguous (re, im) pairs [2, 6]", {2, 6, 2}, {0, -1, 0}, 7186, Layout::Strided)},
        kiln::hfft,
        [](const Tensor& z, int64_t n, int64_t dim, int64_t norm) { return c2r_ref(z, n, dim, norm, true); },
        transform_errors("hfft", kiln::hfft, true));
    r.errors.push_back({"one point: the default n = 0 outputs", [] { hfft(zeros({4, 1, 2})); }, {"hfft", "0"}});
    rows.push_back(std::move(r));
  }
  rows.push_back(transform_row(
      "ihfft",
      {input_sample("length 1 [2, 1]", {2, 1}, {0, -1, 0}, 7191),
       input_sample("length 8 [3, 8]", {3, 8}, {0, -1, 0}, 7192),
       input_sample("length 9 [3, 9] ortho", {3, 9}, {0, -1, 1}, 7193),
       input_sample("length 67 (Bluestein) [67] forward", {67}, {0, -1, 2}, 7194),
       input_sample("length 100 [100]", {100}, {0, -1, 0}, 7195),
       input_sample("dim 0 of [7, 3]", {7, 3}, {0, 0, 0}, 7196),
       input_sample("n = 12 pads 7", {2, 7}, {12, -1, 0}, 7197)},
      kiln::ihfft, [](const Tensor& x, int64_t n, int64_t dim, int64_t norm) { return r2c_ref(x, n, dim, norm, true); },
      transform_errors("ihfft", kiln::ihfft, false)));
}

// The n-d forms: the one-dim references over each dim in turn. `s` and `dims` are full lists here.
CArr cnd(CArr a, const Shape& s, const Shape& dims, int sign, int64_t norm) {
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap(dims[i], static_cast<int64_t>(a.s.size()));
    a = dft(resized(a, d, s[i]), d, sign, scale_of(norm, s[i], sign < 0));
  }
  return a;
}

// fftn's defaults on the complex shape S: with neither, every dim; with s alone, the last s.size();
// with dims alone, or where s has -1, S's sizes there.
std::pair<Shape, Shape> nd_defaults(const Shape& S, std::optional<Shape> s, std::optional<Shape> dims) {
  const int64_t nd = static_cast<int64_t>(S.size());
  Shape d, n;
  if (dims) {
    d = *dims;
  } else {
    const int64_t k = s ? static_cast<int64_t>(s->size()) : nd;
    for (int64_t i = nd - k; i < nd; ++i) d.push_back(i);
  }
  for (size_t i = 0; i < d.size(); ++i) {
    const bool given = s && (*s)[i] != -1;
    n.push_back(given ? (*s)[i] : S[at(wrap(d[i], nd))]);
  }
  return {n, d};
}

Tensor fftn_ref(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dims, int sign, int64_t norm) {
  const CArr a = complex_of(z);
  const auto [n, d] = nd_defaults(a.s, std::move(s), std::move(dims));
  return pairs(cnd(a, n, d, sign, norm));
}

// rfftn: the full n-d DFT of the real x, cut to n / 2 + 1 along the last of the dims.
Tensor rfftn_ref(const Tensor& x, std::optional<Shape> s, std::optional<Shape> dims, int64_t norm) {
  const CArr a = real_of(x);
  const auto [n, d] = nd_defaults(a.s, std::move(s), std::move(dims));
  const int64_t last = wrap(d.back(), x.dim());
  return pairs(resized(cnd(a, n, d, -1, norm), last, n.back() / 2 + 1));
}

// irfftn: the complex inverses over all but the last of the dims, then the Hermitian extension and
// the inverse over the last, whose default output length is 2 (m - 1).
Tensor irfftn_ref(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dims, int64_t norm) {
  CArr a = complex_of(z);
  auto [n, d] = nd_defaults(a.s, s, std::move(dims));
  const int64_t last = wrap(d.back(), static_cast<int64_t>(a.s.size()));
  if (!s || s->back() == -1) n.back() = 2 * (a.s[at(last)] - 1);
  a = cnd(a, Shape(n.begin(), n.end() - 1), Shape(d.begin(), d.end() - 1), +1, norm);
  return reals(dft(hermitian(a, last, n.back()), last, +1, scale_of(norm, n.back(), false)));
}

// hfftn, as PyTorch's: the forward complex transforms over all but the last of the dims, then the
// conjugate's Hermitian extension and the inverse over the last, all with the forward's scales.
Tensor hfftn_ref(const Tensor& z, std::optional<Shape> s, std::optional<Shape> dims, int64_t norm) {
  CArr a = complex_of(z);
  auto [n, d] = nd_defaults(a.s, s, std::move(dims));
  const int64_t last = wrap(d.back(), static_cast<int64_t>(a.s.size()));
  if (!s || s->back() == -1) n.back() = 2 * (a.s[at(last)] - 1);
  a = conj(cnd(a, Shape(n.begin(), n.end() - 1), Shape(d.begin(), d.end() - 1), -1, norm));
  return reals(dft(hermitian(a, last, n.back()), last, +1, scale_of(norm, n.back(), true)));
}

// ihfftn, as PyTorch's: the real signal's transform over the last of the dims with the inverse's
// scale, cut to n / 2 + 1, conjugated, then the inverse complex transforms over the others.
Tensor ihfftn_ref(const Tensor& x, std::optional<Shape> s, std::optional<Shape> dims, int64_t norm) {
  const CArr a = real_of(x);
  const auto [n, d] = nd_defaults(a.s, std::move(s), std::move(dims));
  const int64_t last = wrap(d.back(), x.dim());
  CArr f =
      conj(resized(dft(resized(a, last, n.back()), last, -1, scale_of(norm, n.back(), false)), last, n.back() / 2 + 1));
  return pairs(cnd(f, Shape(n.begin(), n.end() - 1), Shape(d.begin(), d.end() - 1), +1, norm));
}

void add_nd_transforms(std::vector<OpRow>& rows) {
  // fft2 and ifft2 over [..., 6, 10], with s = (s0, s1) when p[0] > 0, in norm p[2].
  rows.push_back(transform_row_of(
      "fft2 and ifft2",
      {input_sample("[2, 6, 10]", {2, 6, 10, 2}, {0, 0, 0}, 7201),
       input_sample("non-contiguous (re, im) pairs [6, 10] ortho", {6, 10, 2}, {0, 0, 1}, 7202, Layout::Strided),
       input_sample("transposed [6, 10] forward", {6, 10, 2}, {0, 0, 2}, 7203, Layout::Transposed),
       input_sample("s = [4, 12] of [6, 10]", {6, 10, 2}, {4, 12, 0}, 7204)},
      [](const TensorList& x) {
        const std::vector<int64_t> p = param_values(x[1]);
        const std::optional<Shape> s = p[0] > 0 ? std::optional<Shape>(Shape{p[0], p[1]}) : std::nullopt;
        return TensorList{fft2(x[0], s, {-2, -1}, norm_name(p[2])), ifft2(x[0], s, {-2, -1}, norm_name(p[2]))};
      },
      [](const TensorList& x) {
        const std::vector<int64_t> p = param_values(x[1]);
        const std::optional<Shape> s = p[0] > 0 ? std::optional<Shape>(Shape{p[0], p[1]}) : std::nullopt;
        return TensorList{fftn_ref(x[0], s, Shape{-2, -1}, -1, p[2]), fftn_ref(x[0], s, Shape{-2, -1}, +1, p[2])};
      },
      {{"s and dim of different lengths",
        [] {
          fft2(zeros({4, 6, 2}), Shape{4, 6, 2});
        },
        {"fft2"}},
       {"a dim out of range",
        [] {
          fft2(zeros({4, 6, 2}), std::nullopt, Shape{0, 2});
        },
        {"fft2", "dim", "2"}},
       {"float16 input",
        [] {
          fft2(zeros({4, 6, 2}, DType::Float16));
        },
        {"fft2", "float16"}}}));
  // fftn and ifftn of a 3-d complex [3, 4, 5]: every dim, s alone (all three, and the last two),
  // dims alone, both, a single dim, and no dim (a copy, as PyTorch's).
  rows.push_back(transform_row_of(
      "fftn and ifftn",
      {input_sample("[3, 4, 5]", {3, 4, 5, 2}, {}, 7211),
       input_sample("non-contiguous (re, im) pairs [3, 4, 5]", {3, 4, 5, 2}, {}, 7212, Layout::Strided),
       input_sample("transposed [4, 3, 5]", {4, 3, 5, 2}, {}, 7213, Layout::Transposed)},
      [](const TensorList& x) {
        return TensorList{fftn(x[0]),
                          fftn(x[0], Shape{2, 6, 5}),
                          fftn(x[0], Shape{6, 4}, std::nullopt, "ortho"),
                          fftn(x[0], std::nullopt, Shape{0, 2}, "forward"),
                          ifftn(x[0]),
                          ifftn(x[0], Shape{4, 3}, Shape{2, 0}, "ortho"),
                          fftn(x[0], std::nullopt, Shape{}),
                          ifftn(x[0], Shape{}, std::nullopt, "forward")};
      },
      [](const TensorList& x) {
        return TensorList{
            fftn_ref(x[0], std::nullopt, std::nullopt, -1, 0), fftn_ref(x[0], Shape{2, 6, 5}, std::nullopt, -1, 0),
            fftn_ref(x[0], Shape{6, 4}, std::nullopt, -1, 1), fftn_ref(x[0], std::nullopt, Shape{0, 2}, -1, 2),
            fftn_ref(x[0], std::nullopt, std::nullopt, +1, 0), fftn_ref(x[0], Shape{4, 3}, Shape{2, 0}, +1, 1),
            // over no dims: the input itself
            pairs(complex_of(x[0])), pairs(complex_of(x[0]))};
      },
      {{"s longer than the complex dims",
        [] {
          fftn(zeros({3, 4, 2}), Shape{3, 4, 2});
        },
        {"fftn"}},
       {"a repeated dim",
        [] {
          fftn(zeros({3, 4, 2}), std::nullopt, Shape{0, 0});
        },
        {"fftn", "dim"}},
       {"an s entry of 0",
        [] {
          fftn(zeros({3, 4, 2}), Shape{3, 0});
        },
        {"fftn", "0"}},
       {"the pair dim named: dim 2 of a [3, 4] complex",
        [] {
          ifftn(zeros({3, 4, 2}), std::nullopt, Shape{2});
        },
        {"ifftn", "dim", "2"}}}));
  // rfft2 and rfftn of a real [4, 6, 10]: the real transform over the last of the dims (dim 0 when
  // dims = [2, 0]).
  rows.push_back(transform_row_of(
      "rfft2 and rfftn",
      {input_sample("[4, 6, 10]", {4, 6, 10}, {}, 7221),
       input_sample("non-contiguous [4, 6, 10]", {4, 6, 10}, {}, 7222, Layout::Strided)},
      [](const TensorList& x) {
        return TensorList{rfft2(x[0]), rfft2(x[0], Shape{5, 9}, {-2, -1}, "ortho"), rfftn(x[0]),
                          rfftn(x[0], std::nullopt, Shape{2, 0}, "forward")};
      },
      [](const TensorList& x) {
        return TensorList{
            rfftn_ref(x[0], std::nullopt, Shape{-2, -1}, 0), rfftn_ref(x[0], Shape{5, 9}, Shape{-2, -1}, 1),
            rfftn_ref(x[0], std::nullopt, std::nullopt, 0), rfftn_ref(x[0], std::nullopt, Shape{2, 0}, 2)};
      },
      {{"float16 input",
        [] {
          rfft2(zeros({4, 6}, DType::Float16));
        },
        {"rfft2", "float16"}},
       {"a dim out of range",
        [] {
          rfftn(zeros({4, 6}), std::nullopt, Shape{0, 2});
        },
        {"rfftn", "dim", "2"}},
       {"no dims to transform",
        [] {
          rfftn(zeros({4, 6}), std::nullopt, Shape{});
        },
        {"rfftn", "at least one dim"}}}));
  // irfft2 and irfftn of a complex [4, 6, 6]: default last length 2 (6 - 1) = 10, s with an odd
  // last length, every dim, dims = [2, 0] (the real inverse over dim 0, default 2 (4 - 1) = 6), and
  // s = [2, 8, 14], which cuts dim 0 and pads dim 1 and the half spectrum (14 reads 8 of 6 points).
  rows.push_back(transform_row_of(
      "irfft2 and irfftn",
      {input_sample("[4, 6, 6]", {4, 6, 6, 2}, {}, 7231),
       input_sample("non-contiguous (re, im) pairs [4, 6, 6]", {4, 6, 6, 2}, {}, 7232, Layout::Strided)},
      [](const TensorList& x) {
        return TensorList{irfft2(x[0]),
                          irfft2(x[0], Shape{5, 9}),
                          irfftn(x[0]),
                          irfftn(x[0], Shape{3, 6, 7}, std::nullopt, "ortho"),
                          irfftn(x[0], std::nullopt, Shape{2, 0}, "forward"),
                          irfftn(x[0], Shape{2, 8, 14})};
      },
      [](const TensorList& x) {
        return TensorList{
            irfftn_ref(x[0], std::nullopt, Shape{-2, -1}, 0), irfftn_ref(x[0], Shape{5, 9}, Shape{-2, -1}, 0),
            irfftn_ref(x[0], std::nullopt, std::nullopt, 0),  irfftn_ref(x[0], Shape{3, 6, 7}, std::nullopt, 1),
            irfftn_ref(x[0], std::nullopt, Shape{2, 0}, 2),   irfftn_ref(x[0], Shape{2, 8, 14}, std::nullopt, 0)};
      },
      {{"one point along the last dim: the default output length 0",
        [] {
          irfft2(zeros({4, 1, 2}));
        },
        {"irfft2", "0"}},
       {"a last dim of 3, not a (re, im) pair",
        [] {
          irfftn(zeros({4, 6, 3}));
        },
        {"irfftn", "2"}},
       {"no dims to transform",
        [] {
          irfftn(zeros({4, 6, 2}), Shape{});
        },
        {"irfftn", "at least one dim"}}}));
}

// hfft2 and hfftn of a complex [4, 6, 5], ihfft2 and ihfftn of a real [4, 6, 9]: the defaults
// (last length 2 (5 - 1) = 8), s that cuts the other dims and the half spectrum (n = 7 reads 4 of
// 5 points) or pads them (n = 12 reads 7), s with -1 entries (their defaults), every dim, dims in
// reverse order (the Hermitian dim is then dim 0), in each norm.
void add_hermitian_nd_transforms(std::vector<OpRow>& rows) {
  rows.push_back(transform_row_of(
      "hfft2 and hfftn",
      {input_sample("[4, 6, 5]", {4, 6, 5, 2}, {}, 7241),
       input_sample("non-contiguous (re, im) pairs [4, 6, 5]", {4, 6, 5, 2}, {}, 7242, Layout::Strided),
       input_sample("transposed [6, 4, 5]", {6, 4, 5, 2}, {}, 7243, Layout::Transposed)},
      [](const TensorList& x) {
        return TensorList{hfft2(x[0]),
                          hfft2(x[0], Shape{5, 9}, {-2, -1}, "ortho"),
                          hfftn(x[0]),
                          hfftn(x[0], Shape{3, 7, 7}, std::nullopt, "forward"),
                          hfftn(x[0], std::nullopt, Shape{2, 0}, "ortho"),
                          hfftn(x[0], Shape{5, 4, 12}),
                          hfftn(x[0], Shape{-1, 5, -1})};
      },
      [](const TensorList& x) {
        return TensorList{
            hfftn_ref(x[0], std::nullopt, Shape{-2, -1}, 0),   hfftn_ref(x[0], Shape{5, 9}, Shape{-2, -1}, 1),
            hfftn_ref(x[0], std::nullopt, std::nullopt, 0),    hfftn_ref(x[0], Shape{3, 7, 7}, std::nullopt, 2),
            hfftn_ref(x[0], std::nullopt, Shape{2, 0}, 1),     hfftn_ref(x[0], Shape{5, 4, 12}, std::nullopt, 0),
            hfftn_ref(x[0], Shape{-1, 5, -1}, std::nullopt, 0)};
      },
      {{"no dims to transform",
        [] {
          hfftn(zeros({4, 6, 2}), std::nullopt, Shape{});
        },
        {"hfftn", "at least one dim"}},
       {"one point along the last dim: the default output length 0",
        [] {
          hfft2(zeros({4, 1, 2}));
        },
        {"hfft2", "0"}},
       {"a last dim of 3, not a (re, im) pair",
        [] {
          hfftn(zeros({4, 6, 3}));
        },
        {"hfftn", "2"}},
       {"float16 input",
        [] {
          hfft2(zeros({4, 6, 2}, DType::Float16));
        },
        {"hfft2", "float16"}}}));
  rows.push_back(transform_row_of(
      "ihfft2 and ihfftn",
      {input_sample("[4, 6, 9]", {4, 6, 9}, {}, 7251),
       input_sample("non-contiguous [4, 6, 9]", {4, 6, 9}, {}, 7252, Layout::Strided),
       input_sample("transposed [6, 4, 9]", {6, 4, 9}, {}, 7253, Layout::Transposed)},
      [](const TensorList& x) {
        return TensorList{ihfft2(x[0]),
                          ihfft2(x[0], Shape{5, 8}, {-2, -1}, "forward"),
                          ihfftn(x[0]),
                          ihfftn(x[0], Shape{3, 7, 10}, std::nullopt, "ortho"),
                          ihfftn(x[0], std::nullopt, Shape{2, 0}, "forward"),
                          ihfftn(x[0], Shape{-1, 3, 12})};
      },
      [](const TensorList& x) {
        return TensorList{
            ihfftn_ref(x[0], std::nullopt, Shape{-2, -1}, 0), ihfftn_ref(x[0], Shape{5, 8}, Shape{-2, -1}, 2),
            ihfftn_ref(x[0], std::nullopt, std::nullopt, 0),  ihfftn_ref(x[0], Shape{3, 7, 10}, std::nullopt, 1),
            ihfftn_ref(x[0], std::nullopt, Shape{2, 0}, 2),   ihfftn_ref(x[0], Shape{-1, 3, 12}, std::nullopt, 0)};
      },
      {{"no dims to transform",
        [] {
          ihfftn(zeros({4, 6}), Shape{});
        },
        {"ihfftn", "at least one dim"}},
       {"a dim out of range",
        [] {
          ihfft2(zeros({4, 6}), std::nullopt, Shape{0, 2});
        },
        {"ihfft2", "dim", "2"}},
       {"int64 input",
        [] {
          ihfftn(zeros({4, 6}, DType::Int64));
        },
        {"ihfftn", "int64"}}}));
}

void add_frequencies_and_shifts(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "fftfreq and rfftfreq";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {shape_sample("n = 7 and 8 with d = 0.5, n = 1")};
    r.op = [](const TensorList& x) {
      const TensorOptions o(dt(x), x[0].device());
      return TensorList{fftfreq(7, 0.5, o),  fftfreq(8, 0.5, o),  fftfreq(1, 1.0, o),
                        rfftfreq(7, 0.5, o), rfftfreq(8, 0.5, o), rfftfreq(1, 1.0, o)};
    };
    r.reference = [](const TensorList&) {
      // [0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1] / (d n), and rfft's 0 .. n/2.
      auto full = [](int64_t n, double d) {
        Values v;
        for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(i < (n + 1) / 2 ? i : i - n) / (d * n));
        return from_values(v, {n});
      };
      auto half = [](int64_t n, double d) {
        Values v;
        for (int64_t i = 0; i <= n / 2; ++i) v.push_back(static_cast<double>(i) / (d * n));
        return from_values(v, {n / 2 + 1});
      };
      return TensorList{full(7, 0.5), full(8, 0.5), full(1, 1.0), half(7, 0.5), half(8, 0.5), half(1, 1.0)};
    };
    r.out_dtype = same_dtype;
    r.errors = {{"negative n", [] { fftfreq(-1); }, {"fftfreq", "-1"}},
                {"negative n", [] { rfftfreq(-2); }, {"rfftfreq", "-2"}},
                {"an integer dtype", [] { fftfreq(4, 1.0, DType::Int64); }, {"fftfreq", "int64"}},
                {"an integer dtype", [] { rfftfreq(4, 1.0, DType::Int32); }, {"rfftfreq", "int32"}}};
    rows.push_back(std::move(r));
  }
  {
    // The shifts roll each dim by floor(size / 2) (fftshift) or back (ifftshift): all dims, one
    // dim, a negative dim and two dims in reverse order, on odd and even sizes.
    OpRow r;
    r.name = "fftshift and ifftshift";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {{"[5, 6]",
                  [](DType t, Device d) {
                    return TensorList{rnd({5, 6}, t, d, 7301)};
                  }},
                 {"non-contiguous [4, 7, 3]",
                  [](DType t, Device d) {
                    return TensorList{noncontig(rnd({4, 7, 3}, t, d, 7302))};
                  }},
                 {"transposed [9, 2]",
                  [](DType t, Device d) {
                    return TensorList{rnd({2, 9}, t, d, 7303).t()};
                  }},
                 {"[1, 3]", [](DType t, Device d) {
                    return TensorList{rnd({1, 3}, t, d, 7304)};
                  }}};
    r.op = [](const TensorList& x) {
      return TensorList{fftshift(x[0]),
                        ifftshift(x[0]),
                        fftshift(x[0], Shape{0}),
                        ifftshift(x[0], Shape{-1}),
                        fftshift(x[0], Shape{1, 0}),
                        ifftshift(x[0], Shape{0, 1})};
    };
    r.reference = [](const TensorList& x) {
      // fftshift: out[i] = x[(i - size / 2) mod size], ifftshift: x[(i + size / 2) mod size]
      auto shifted = [&x](Shape dims, bool forward) {
        const Shape sizes = x[0].sizes();
        for (int64_t& d : dims) d = wrap(d, x[0].dim());
        return ref_pick(x[0], sizes, [sizes, dims, forward](Shape idx) {
          for (int64_t d : dims) {
            const int64_t n = sizes[at(d)], h = n / 2;
            idx[at(d)] = forward ? (idx[at(d)] - h + n) % n : (idx[at(d)] + h) % n;
          }
          return idx;
        });
      };
      Shape all;
      for (int64_t d = 0; d < x[0].dim(); ++d) all.push_back(d);
      return TensorList{shifted(all, true),   shifted(all, false),   shifted({0}, true),
                        shifted({-1}, false), shifted({1, 0}, true), shifted({0, 1}, false)};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {{"dim 2 of a 2-d input",
                 [] {
                   fftshift(zeros({3, 4}), Shape{2});
                 },
                 {"fftshift", "dim", "2"}},
                {"dim -3 of a 2-d input",
                 [] {
                   ifftshift(zeros({3, 4}), Shape{-3});
                 },
                 {"ifftshift", "dim", "-3"}}};
    rows.push_back(std::move(r));
  }
}

// stft's parameters: n_fft, hop (0: default), win_length (0: default), center, reflect (else
// constant) padding, normalized, onesided (-1: default), and whether the window is passed (else
// the default ones; the sample's window is then unused and its gradient 0).
enum StftParam { kNfft, kHop, kWin, kCenter, kReflect, kNormalized, kOnesided, kUseWindow };

Sample stft_sample(std::string name, Shape x_shape, int64_t window_length, std::vector<int64_t> p, uint64_t seed) {
  return {std::move(name), [=](DType t, Device d) {
            return TensorList{rnd(x_shape, t, d, seed), hann_window(window_length, true, TensorOptions(t, d)),
                              params(p, d)};
          }};
}

std::optional<bool> opt_bool(int64_t v) { return v < 0 ? std::nullopt : std::optional<bool>(v != 0); }

// The window of win_length samples (the given one, or ones) centred in n_fft zeros.
Values padded_window(const Tensor& window, bool use_window, int64_t n_fft, int64_t win_length) {
  const Values w = use_window ? values(window) : Values(at(win_length), 1.0);
  Values full(at(n_fft), 0.0);
  const int64_t left = (n_fft - win_length) / 2;
  for (int64_t i = 0; i < win_length; ++i) full[at(left + i)] = w[at(i)];
  return full;
}

Tensor stft_ref(const Tensor& x, const Tensor& window, const std::vector<int64_t>& p) {
  const int64_t n_fft = p[kNfft], hop = p[kHop] > 0 ? p[kHop] : n_fft / 4, win = p[kWin] > 0 ? p[kWin] : n_fft;
  const bool center = p[kCenter] != 0, reflect = p[kReflect] != 0, onesided = p[kOnesided] != 0;
  const Values w = padded_window(window, p[kUseWindow] != 0, n_fft, win);
  const Values xv = values(x);
  const int64_t L = x.size(-1), batch = x.dim() == 2 ? x.size(0) : 1;
  const int64_t pad = center ? n_fft / 2 : 0, frames = 1 + (L + 2 * pad - n_fft) / hop;
  const int64_t F = onesided ? n_fft / 2 + 1 : n_fft;
  const Real scale = p[kNormalized] != 0 ? 1 / std::sqrt(static_cast<Real>(n_fft)) : 1;
  // Sample i of the padded signal: reflect mirrors about the ends without repeating them
  // (x[-i] = x[i], x[L - 1 + i] = x[L - 1 - i]); constant padding is zeros.
  auto sample = [&](int64_t b, int64_t i) -> Real {
    int64_t j = i - pad;
    if (j < 0 || j >= L) {
      if (!reflect) return 0;
      j = j < 0 ? -j : 2 * (L - 1) - j;
    }
    return xv[at(b * L + j)];
  };
  CArr out{x.dim() == 2 ? Shape{batch, F, frames} : Shape{F, frames}, {}};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 0; k < F; ++k)
      for (int64_t t = 0; t < frames; ++t) {
        Cx sum = 0;
        for (int64_t j = 0; j < n_fft; ++j)
          sum += sample(b, t * hop + j) * static_cast<Real>(w[at(j)]) * root(j * k, n_fft, -1);
        out.v.push_back(scale * sum);
      }
  return pairs(out);
}

// istft's parameters: n_fft, hop (0: default), win_length (0: default), center, normalized,
// onesided (-1: default), length (-1: default), and whether the window is passed.
enum IstftParam { kInFft, kInHop, kInWin, kInCenter, kInNormalized, kInOnesided, kInLength, kInUseWindow };

// Random spectra [(B,) F, frames] (not the stft of any signal: the overlap-add of inconsistent
// frames is what istft defines too) and a window: hann, or hamming where the frames start at
// sample 0 without centring (hann's 0 there would leave the envelope 0).
Sample istft_sample(std::string name, Shape z_shape, int64_t window_length, bool hamming, std::vector<int64_t> p,
                    uint64_t seed) {
  return {std::move(name), [=](DType t, Device d) {
            const TensorOptions o(t, d);
            return TensorList{rnd(z_shape, t, d, seed),
                              hamming ? hamming_window(window_length, true, o) : hann_window(window_length, true, o),
                              params(p, d)};
          }};
}

Tensor istft_ref(const Tensor& z, const Tensor& window, const std::vector<int64_t>& p) {
  const int64_t n_fft = p[kInFft], hop = p[kInHop] > 0 ? p[kInHop] : n_fft / 4, win = p[kInWin] > 0 ? p[kInWin] : n_fft;
  const Values w = padded_window(window, p[kInUseWindow] != 0, n_fft, win);
  const bool batched = z.dim() == 4;
  const int64_t batch = batched ? z.size(0) : 1, F = z.size(-3), frames = z.size(-2);
  const CArr a = complex_of(z);  // [(B,) F, frames]
  const Real scale = p[kInNormalized] != 0 ? 1 / std::sqrt(static_cast<Real>(n_fft)) : 1 / static_cast<Real>(n_fft);
  const int64_t span = n_fft + hop * (frames - 1);
  const int64_t start = p[kInCenter] != 0 ? n_fft / 2 : 0;
  const int64_t end = p[kInLength] >= 0 ? start + p[kInLength] : (p[kInCenter] != 0 ? span - n_fft / 2 : span);
  Values out;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Real> y(at(span), 0), envelope(at(span), 0);
    for (int64_t t = 0; t < frames; ++t) {
      // The frame's first n / 2 + 1 frequencies (onesided, or a full spectrum cut to them).
      CArr column{{F}, {}};
      for (int64_t k = 0; k < F; ++k) column.v.push_back(a.v[at((b * F + k) * frames + t)]);
      const CArr frame = dft(hermitian(column, 0, n_fft), 0, +1, scale);
      for (int64_t j = 0; j < n_fft; ++j) {
        y[at(t * hop + j)] += frame.v[at(j)].real() * static_cast<Real>(w[at(j)]);
        envelope[at(t * hop + j)] += static_cast<Real>(w[at(j)]) * static_cast<Real>(w[at(j)]);
      }
    }
    // Past the frames' span (a longer `length`) the output is zero-padded.
    for (int64_t i = start; i < end; ++i)
      out.push_back(i < span ? static_cast<double>(y[at(i)] / envelope[at(i)]) : 0.0);
  }
  const int64_t len = end - start;
  return from_values(out, batched ? Shape{batch, len} : Shape{len});
}

void add_stft_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "stft";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {
        stft_sample("hann 16, hop 4, centred reflect [2, 40]", {2, 40}, 16, {16, 4, 0, 1, 1, 0, -1, 1}, 7401),
        stft_sample("not centred [37]", {37}, 16, {16, 4, 16, 0, 1, 0, 1, 1}, 7402),
        stft_sample("centred constant, normalized [2, 30]", {2, 30}, 16, {16, 4, 0, 1, 0, 1, 1, 1}, 7403),
        stft_sample("win_length 12, a window of 12, hop 5 [40]", {40}, 12, {16, 5, 12, 1, 1, 0, 1, 1}, 7404),
        stft_sample("two-sided, hop 3, not centred [25]", {25}, 16, {16, 3, 0, 0, 1, 0, 0, 1}, 7405),
        stft_sample("defaults: ones, hop 10 / 4 = 2, win_length 6 [2, 21]", {2, 21}, 6, {10, 0, 6, 1, 1, 0, -1, 0},
                    7406),
    };
    r.op = [](const TensorList& x) {
      const std::vector<int64_t> p = param_values(x[2]);
      return TensorList{stft(x[0], p[kNfft], opt(p[kHop]), opt(p[kWin]), p[kUseWindow] != 0 ? x[1] : Tensor(),
                             p[kCenter] != 0, p[kReflect] != 0 ? PadMode::Reflect : PadMode::Constant,
                             p[kNormalized] != 0, opt_bool(p[kOnesided]))};
    };
    r.reference = [](const TensorList& x) { return TensorList{stft_ref(x[0], x[1], param_values(x[2]))}; };
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    transform_tolerance(r);
    r.errors = {
        {"n_fft 16 past a signal of 10, not centred",
         [] { stft(zeros({10}), 16, 4, std::nullopt, Tensor(), false); },
         {"stft", "16"}},
        {"hop 0", [] { stft(zeros({40}), 16, 0); }, {"stft", "hop"}},
        {"n_fft 0", [] { stft(zeros({40}), 0); }, {"stft", "0"}},
        {"a window of 16 for win_length 12", [] { stft(zeros({40}), 16, 4, 12, hann_window(16)); }, {"stft", "window"}},
        {"win_length 20 over n_fft 16", [] { stft(zeros({40}), 16, 4, 20); }, {"stft", "20"}},
        {"a 3-d signal",
         [] {
           stft(zeros({2, 2, 40}), 16);
         },
         {"stft", "[2, 2, 40]"}},
        {"float16 signal", [] { stft(zeros({40}, DType::Float16), 16); }, {"stft", "float16"}},
        undefined_input("stft", [](const Tensor& t) { return stft(t, 16); }),
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "istft";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {
        istft_sample("hann 16, hop 4, centred [2, 9, 11]", {2, 9, 11, 2}, 16, false, {16, 4, 0, 1, 0, -1, -1, 1}, 7501),
        istft_sample("hamming, not centred [9, 8]", {9, 8, 2}, 16, true, {16, 4, 16, 0, 0, 1, -1, 1}, 7502),
        istft_sample("win_length 12, hop 3, normalized, length 30 cuts [9, 14]", {9, 14, 2}, 12, false,
                     {16, 3, 12, 1, 1, -1, 30, 1}, 7503),
        istft_sample("two-sided [16, 8], length 40 zero-pads", {16, 8, 2}, 16, false, {16, 4, 0, 1, 0, 0, 40, 1}, 7504),
        istft_sample("defaults: ones, hop 8 / 4 = 2 [5, 9]", {5, 9, 2}, 8, false, {8, 0, 0, 1, 0, -1, -1, 0}, 7505),
    };
    r.op = [](const TensorList& x) {
      const std::vector<int64_t> p = param_values(x[2]);
      return TensorList{istft(x[0], p[kInFft], opt(p[kInHop]), opt(p[kInWin]), p[kInUseWindow] != 0 ? x[1] : Tensor(),
                              p[kInCenter] != 0, p[kInNormalized] != 0, opt_bool(p[kInOnesided]),
                              p[kInLength] >= 0 ? std::optional<int64_t>(p[kInLength]) : std::nullopt)};
    };
    r.reference = [](const TensorList& x) { return TensorList{istft_ref(x[0], x[1], param_values(x[2]))}; };
    // The window's gradient includes its part through the overlap-added squared windows.
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    transform_tolerance(r);
    r.errors = {
        {"a window of zeros: the envelope is 0 (NOLA)",
         [] {
           istft(zeros({9, 5, 2}), 16, 4, std::nullopt, zeros({16}));
         },
         {"istft"}},
        {"hop 0",
         [] {
           istft(zeros({9, 5, 2}), 16, 0);
         },
         {"istft", "hop"}},
        {"7 frequencies for n_fft 16",
         [] {
           istft(zeros({7, 5, 2}), 16);
         },
         {"istft", "7"}},
        {"a window of 16 for win_length 12",
         [] {
           istft(zeros({9, 5, 2}), 16, 4, 12, hann_window(16));
         },
         {"istft", "window"}},
        {"hop 10 over win_length 8",
         [] {
           istft(zeros({9, 5, 2}), 16, 10, 8);
         },
         {"istft", "hop_length 10", "8"}},
        {"a last dim of 3, not a (re, im) pair",
         [] {
           istft(zeros({9, 5, 3}), 16);
         },
         {"istft", "2"}},
        {"float16 spectra",
         [] {
           istft(zeros({9, 5, 2}, DType::Float16), 16);
         },
         {"istft", "float16"}},
    };
    rows.push_back(std::move(r));
  }
}

// Complex values with |z| in [0.3, 2] and arg z in [-2.9, 2.9]: away from 0 (|z| and arg are not
// differentiable there) and from the branch cut of arg on the negative real axis.
Tensor polar_values(const Shape& s, DType t, Device d, uint64_t seed) {
  const Values r = values(rnd_range(s, DType::Float64, Device::cpu(), seed, 0.3, 2.0));
  const Values a = values(rnd_range(s, DType::Float64, Device::cpu(), seed + 1, -2.9, 2.9));
  Values v;
  for (size_t i = 0; i < r.size(); ++i) {
    v.push_back(r[i] * std::cos(a[i]));
    v.push_back(r[i] * std::sin(a[i]));
  }
  Shape ps = s;
  ps.push_back(2);
  return from_values(v, ps).to(t).to(d);
}

void add_complex_helper_rows(std::vector<OpRow>& rows) {
  {
    // a [3, 4] times b [4] (broadcast), conj, real and imag of a, and pair(re [3, 4], im [4]).
    OpRow r;
    r.name = "complex_mul, complex_conj, complex_pair, complex_real and complex_imag";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {{"a [3, 4], b [4], re [3, 4], im [4]",
                  [](DType t, Device d) {
                    return TensorList{rnd({3, 4, 2}, t, d, 7601), rnd({4, 2}, t, d, 7602), rnd({3, 4}, t, d, 7603),
                                      rnd({4}, t, d, 7604)};
                  }},
                 {"non-contiguous (re, im) pairs a [2, 5], b [2, 5]", [](DType t, Device d) {
                    return TensorList{noncontig(rnd({2, 5, 2}, t, d, 7605)), rnd({5, 2, 2}, t, d, 7606).transpose(0, 1),
                                      noncontig(rnd({2, 5}, t, d, 7607)), rnd({2, 1}, t, d, 7608)};
                  }}};
    r.op = [](const TensorList& x) {
      return TensorList{complex_mul(x[0], x[1]), complex_conj(x[0]), complex_pair(x[2], x[3]), complex_real(x[0]),
                        complex_imag(x[0])};
    };
    r.reference = [](const TensorList& x) {
      const CArr a = complex_of(x[0]), b = complex_of(x[1]);
      // b broadcast to a's complex shape over its trailing dims.
      CArr prod{a.s, {}};
      Shape bs = b.s;
      while (bs.size() < a.s.size()) bs.insert(bs.begin(), 1);
      for (int64_t i = 0; i < shape_numel(a.s); ++i) {
        Shape idx = unravel(i, a.s);
        for (size_t k = 0; k < idx.size(); ++k)
          if (bs[k] == 1) idx[k] = 0;
        prod.v.push_back(a.v[at(i)] * b.v[at(ravel(idx, bs))]);
      }
      // pair(re, im): broadcast to their common shape.
      Shape s = x[2].sizes();
      const Shape is = x[3].sizes();
      if (s.size() < is.size()) s.insert(s.begin(), is.size() - s.size(), 1);
      for (size_t k = 0; k < s.size(); ++k) {
        const size_t from_end = s.size() - 1 - k;
        const int64_t other = from_end < is.size() ? is[is.size() - 1 - from_end] : 1;
        s[k] = std::max(s[k], other);
      }
      const Shape rs = x[2].sizes();
      const Values re = values(x[2]), im = values(x[3]);
      CArr pair{s, {}};
      auto pick = [&s](Shape idx, const Shape& from) {
        idx.erase(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(s.size() - from.size()));
        for (size_t k = 0; k < idx.size(); ++k)
          if (from[k] == 1) idx[k] = 0;
        return ravel(idx, from);
      };
      for (int64_t i = 0; i < shape_numel(s); ++i) {
        const Shape idx = unravel(i, s);
        pair.v.emplace_back(re[at(pick(idx, rs))], im[at(pick(idx, is))]);
      }
      CArr re_a{a.s, {}}, im_a{a.s, {}};
      for (const Cx& c : a.v) {
        re_a.v.emplace_back(c.real(), 0);
        im_a.v.emplace_back(c.imag(), 0);
      }
      return TensorList{pairs(prod), pairs(conj(a)), pairs(pair), reals(re_a), reals(im_a)};
    };
    r.differentiable = {0, 1, 2, 3};
    r.out_dtype = same_dtype;
    r.errors = {
        {"a last dim of 3",
         [] {
           complex_mul(zeros({3, 3}), zeros({3, 2}));
         },
         {"complex_mul", "2"}},
        {"a last dim of 5", [] { complex_conj(zeros({5})); }, {"complex_conj", "2"}},
        {"a last dim of 1",
         [] {
           complex_real(zeros({4, 1}));
         },
         {"complex_real", "2"}},
        {"integer parts",
         [] { complex_pair(zeros({2}, DType::Int64), zeros({2}, DType::Int64)); },
         {"complex_pair", "int64"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // |z| and arg z of z [3, 5] away from 0 and the branch cut; polar(abs [3, 5], angle [5]).
    OpRow r;
    r.name = "complex_abs, complex_angle and complex_polar";
    r.dtypes = {DType::Float32, DType::Float64};
    r.samples = {{"z [3, 5], abs [3, 5], angle [5]",
                  [](DType t, Device d) {
                    return TensorList{polar_values({3, 5}, t, d, 7621), rnd_range({3, 5}, t, d, 7623, 0.1, 2.0),
                                      rnd_range({5}, t, d, 7624, -4.0, 4.0)};
                  }},
                 {"non-contiguous z [2, 4], abs [2, 1], angle [2, 4]", [](DType t, Device d) {
                    return TensorList{noncontig(polar_values({2, 4}, t, d, 7625)),
                                      rnd_range({2, 1}, t, d, 7627, 0.1, 2.0),
                                      noncontig(rnd_range({2, 4}, t, d, 7628, -4.0, 4.0))};
                  }}};
    r.op = [](const TensorList& x) {
      return TensorList{complex_abs(x[0]), complex_angle(x[0]), complex_polar(x[1], x[2])};
    };
    r.reference = [](const TensorList& x) {
      const CArr z = complex_of(x[0]);
      Values abs, angle;
      for (const Cx& c : z.v) {
        abs.push_back(static_cast<double>(std::hypot(c.real(), c.imag())));
        angle.push_back(static_cast<double>(std::atan2(c.imag(), c.real())));
      }
      // polar: abs and angle broadcast to their common shape (the larger of the two)
      const Shape as = x[1].sizes(), gs = x[2].sizes();
      const Shape s = shape_numel(as) >= shape_numel(gs) ? as : gs;
      const Values av = values(x[1]), gv = values(x[2]);
      auto pick = [&s](Shape idx, const Shape& from) {
        idx.erase(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(s.size() - from.size()));
        for (size_t k = 0; k < idx.size(); ++k)
          if (from[k] == 1) idx[k] = 0;
        return ravel(idx, from);
      };
      CArr polar{s, {}};
      for (int64_t i = 0; i < shape_numel(s); ++i) {
        const Shape idx = unravel(i, s);
        const Real m = av[at(pick(idx, as))], g = gv[at(pick(idx, gs))];
        polar.v.emplace_back(m * std::cos(g), m * std::sin(g));
      }
      return TensorList{from_values(abs, z.s), from_values(angle, z.s), pairs(polar)};
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = same_dtype;
    r.errors = {
        {"a last dim of 3",
         [] {
           complex_abs(zeros({4, 3}));
         },
         {"complex_abs", "2"}},
        {"a last dim of 1",
         [] {
           complex_angle(zeros({4, 1}));
         },
         {"complex_angle", "2"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace

void add_fft_rows(std::vector<OpRow>& rows) {
  add_complex_transforms(rows);
  add_real_transforms(rows);
  add_nd_transforms(rows);
  add_hermitian_nd_transforms(rows);
  add_frequencies_and_shifts(rows);
  add_stft_rows(rows);
  add_complex_helper_rows(rows);
}

}  // namespace kiln::test
