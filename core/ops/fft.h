// The discrete Fourier transform, as torch.fft has it (fft, ifft, rfft, irfft, hfft, ihfft, their
// 2-d and n-d forms, fftfreq, rfftfreq, fftshift, ifftshift), the short-time Fourier transform
// (stft, istft), and the few complex operations a spectral model needs.
//
// kiln has no complex dtype. A complex tensor of shape S is a real tensor of shape S + [2] whose
// last dim holds (real, imaginary): PyTorch's torch.view_as_real layout, so a kiln result equals
// torch.view_as_real of PyTorch's, and a gradient equals view_as_real of PyTorch's complex
// gradient. The ops that take complex inputs (fft, ifft, irfft, hfft, ...) count `dim` over S,
// without the pair dim: fft(z, n, -1) transforms the last complex dim, z's dim -2.
//
// How it is computed (docs/fft.md): every transform is kiln's ops, so the same code runs on the
// CPU and on a GPU. A length up to 64 is one matrix product with the DFT matrix; a longer one that
// factors as n1 * n2 is the four-step Cooley-Tukey split (n2 transforms of length n1, a twiddle
// product, n1 transforms of length n2), recursively; a prime length over 64 is Bluestein's
// chirp-z transform, a convolution of a power-of-two length. Real input of even length is packed
// into a complex one of half the length. The products never use TF32 (a float32 transform keeps
// float32's precision on a GPU whatever cuda::math_switches() says), and autocast leaves them
// alone. Each transform records one autograd node whose backward is the adjoint transform (ifft's
// for fft, a scaled rfft for irfft, ...), so backward saves nothing and costs one transform.
// The DFT matrices and twiddles are built on the host in float64 and cached per length, kind,
// dtype and device (fft_cache_size, fft_cache_clear), as PyTorch caches cuFFT plans: a CUDA graph
// that captures a transform reads them, so capture after an eager warm-up has filled the cache.
//
// Inputs are float32 or float64: a float16 or bfloat16 input is a DTypeError, except under
// autocast, which casts it to float32 (as PyTorch's CPU autocast list does for its transforms).
//
// `norm` names the scaling, as torch.fft's: "backward" (the default: the forward transform is not
// scaled, the inverse divides by n), "ortho" (both divide by sqrt(n)) or "forward" (the forward
// divides by n, the inverse is not scaled).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops/factory.h"
#include "core/ops/shape.h"
#include "core/tensor.h"

namespace kiln {

// --- one dim ---------------------------------------------------------------------------------
// `n` is the transform's length: the input is cut to n along `dim`, or padded with zeros to it
// (default: its size there). For irfft and hfft, n is the output's length (default 2 * (m - 1)
// for m input points) and the input is cut or padded to n / 2 + 1 points.

// X_k = sum_j z_j exp(-2 pi i j k / n): complex z [*, 2] -> complex [*, 2].
Tensor fft(const Tensor& z, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
           const std::string& norm = "backward");
// z_j = sum_k X_k exp(+2 pi i j k / n) / n: the inverse of fft.
Tensor ifft(const Tensor& z, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
            const std::string& norm = "backward");
// fft of a real x, the n / 2 + 1 frequencies 0..n/2 (the others are their conjugates): real ->
// complex [*, 2].
Tensor rfft(const Tensor& x, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
            const std::string& norm = "backward");
// The inverse of rfft: the real signal of length n whose spectrum's first n / 2 + 1 values are z
// (complex -> real). The imaginary parts of the zero frequency and, for even n, of frequency n / 2
// are not read, as PyTorch's (a real signal's are 0).
Tensor irfft(const Tensor& z, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
             const std::string& norm = "backward");
// The n-point spectrum (real) of the signal with Hermitian symmetry whose first half is z: irfft
// of conj(z) with the forward transform's scaling (complex -> real). torch.fft.hfft.
Tensor hfft(const Tensor& z, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
            const std::string& norm = "backward");
// The inverse of hfft: conj(rfft(x)) with the inverse's scaling (real -> complex). torch.fft.ihfft.
Tensor ihfft(const Tensor& x, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
             const std::string& norm = "backward");

// --- several dims --------------------------------------------------------------------------------
// The transform over each of `dim` in turn, each cut or padded to its entry of `s`. fftn's
// defaults, as PyTorch's: with neither, every (complex) dim; with s alone, the last s.size()
// dims; with dim alone, the input's sizes. rfftn takes the real transform over the last of `dim`
// and the complex one over the others; irfftn the complex inverses first, then the real one over
// the last dim, whose output length is s's last entry (default 2 * (m - 1)). fftn and ifftn over
// no dims (an empty dim or s, or a 0-d complex input) return a copy of z, as PyTorch's (so do fft2
// and ifft2 with an empty dim); the real and Hermitian forms need at least one dim.
Tensor fftn(const Tensor& z, std::optional<Shape> s = std::nullopt, std::optional<Shape> dim = std::nullopt,
            const std::string& norm = "backward");
Tensor ifftn(const Tensor& z, std::optional<Shape> s = std::nullopt, std::optional<Shape> dim = std::nullopt,
             const std::string& norm = "backward");
Tensor rfftn(const Tensor& x, std::optional<Shape> s = std::nullopt, std::optional<Shape> dim = std::nullopt,
             const std::string& norm = "backward");
Tensor irfftn(const Tensor& z, std::optional<Shape> s = std::nullopt, std::optional<Shape> dim = std::nullopt,
              const std::string& norm = "backward");
// hfftn: the n-d form of hfft, the real spectrum of the signal that is Hermitian over `dim`
// (x[-j] = conj(x[j]), every index of `dim` negated at once) and whose first half along the last
// of `dim` is z: the forward complex transforms over the other dims, then hfft over the last
// (complex -> real; its output length is s's last entry, default 2 * (m - 1), m z's size there).
// ihfftn, its inverse: ihfft over the last of `dim`, then the inverse complex transforms over the
// others (real -> complex; conj(rfftn(x)) with the inverse's scaling). Defaults as fftn's.
Tensor hfftn(const Tensor& z, std::optional<Shape> s = std::nullopt, std::optional<Shape> dim = std::nullopt,
             const std::string& norm = "backward");
Tensor ihfftn(const Tensor& x, std::optional<Shape> s = std::nullopt, std::optional<Shape> dim = std::nullopt,
              const std::string& norm = "backward");
// The n-d forms over the last two dims (default).
Tensor fft2(const Tensor& z, std::optional<Shape> s = std::nullopt, const Shape& dim = {-2, -1},
            const std::string& norm = "backward");
Tensor ifft2(const Tensor& z, std::optional<Shape> s = std::nullopt, const Shape& dim = {-2, -1},
             const std::string& norm = "backward");
Tensor rfft2(const Tensor& x, std::optional<Shape> s = std::nullopt, const Shape& dim = {-2, -1},
             const std::string& norm = "backward");
Tensor irfft2(const Tensor& z, std::optional<Shape> s = std::nullopt, const Shape& dim = {-2, -1},
              const std::string& norm = "backward");
Tensor hfft2(const Tensor& z, std::optional<Shape> s = std::nullopt, const Shape& dim = {-2, -1},
             const std::string& norm = "backward");
Tensor ihfft2(const Tensor& x, std::optional<Shape> s = std::nullopt, const Shape& dim = {-2, -1},
              const std::string& norm = "backward");

// --- frequencies and shifts ----------------------------------------------------------------------
// The sample frequencies of fft of length n with sample spacing d: [0, 1, ..., ceil(n/2) - 1,
// -floor(n/2), ..., -1] / (d * n). rfftfreq: rfft's n / 2 + 1 of them, [0, 1, ..., n/2] / (d * n).
// Floating options only (float32 by default).
Tensor fftfreq(int64_t n, double d = 1.0, TensorOptions options = {});
Tensor rfftfreq(int64_t n, double d = 1.0, TensorOptions options = {});
// Rolls each of `dims` (default: all of x's dims) by half its size, so the zero frequency moves to
// the middle; ifftshift undoes it (they differ for odd sizes). These see x as it is: on a complex
// tensor pass the dims to shift, which must not include the pair dim.
Tensor fftshift(const Tensor& x, std::optional<Shape> dims = std::nullopt);
Tensor ifftshift(const Tensor& x, std::optional<Shape> dims = std::nullopt);

// --- the short-time Fourier transform ------------------------------------------------------------
// torch.stft of a real signal x [L] or [B, L] -> complex [(B,) n_fft / 2 + 1, frames, 2] (onesided,
// the default) or [(B,) n_fft, frames, 2]: frame t is x[t * hop, t * hop + n_fft) times the window,
// transformed. hop_length defaults to n_fft / 4 (floor); the window (default: ones) has
// win_length samples (default n_fft) and is padded with zeros on both sides to n_fft. `center`
// pads x by n_fft / 2 on both sides with pad_mode (Reflect by default; Constant pads zeros) so
// frame t is centred on sample t * hop. `normalized` scales by 1 / sqrt(n_fft). Differentiable in
// x and in the window.
Tensor stft(const Tensor& x, int64_t n_fft, std::optional<int64_t> hop_length = std::nullopt,
            std::optional<int64_t> win_length = std::nullopt, const Tensor& window = {}, bool center = true,
            PadMode pad_mode = PadMode::Reflect, bool normalized = false, std::optional<bool> onesided = std::nullopt);
// The inverse of stft by weighted overlap-add: each frame's inverse transform times the window,
// summed at its place and divided by the sum of the squared windows there (the result equals x
// wherever that sum is nonzero: an Error names the first sample where it is below 1e-11, as
// PyTorch's). z [(B,) F, frames, 2]; onesided (default: F != n_fft) reads the first n / 2 + 1
// frequencies as rfft's, a full spectrum is cut to them (its signal is taken as real). `length`
// cuts or zero-pads the output (default: all of the frames' span, less the centre padding).
// hop_length must not exceed win_length (as PyTorch's). Differentiable in z and in the window
// (through the squared windows' sum too).
Tensor istft(const Tensor& z, int64_t n_fft, std::optional<int64_t> hop_length = std::nullopt,
             std::optional<int64_t> win_length = std::nullopt, const Tensor& window = {}, bool center = true,
             bool normalized = false, std::optional<bool> onesided = std::nullopt,
             std::optional<int64_t> length = std::nullopt);

// --- complex values as (real, imaginary) pairs ---------------------------------------------------
// re + i im -> [*, 2] (torch.complex; re and im broadcast, same floating dtype).
Tensor complex_pair(const Tensor& re, const Tensor& im);
// The real and imaginary parts of z [*, 2] (views, as torch.real and torch.imag).
Tensor complex_real(const Tensor& z);
Tensor complex_imag(const Tensor& z);
// re - i im.
Tensor complex_conj(const Tensor& z);
// The complex product of a and b (broadcast over the complex shapes).
Tensor complex_mul(const Tensor& a, const Tensor& b);
// |z| = hypot(re, im), [*]. Its gradient is z / |z|, 0 at z = 0 (as PyTorch's abs of a complex).
Tensor complex_abs(const Tensor& z);
// arg z = atan2(im, re) in [-pi, pi], [*]. Its gradient is 0 at z = 0 (as PyTorch's angle).
Tensor complex_angle(const Tensor& z);
// abs * exp(i angle) (torch.polar; broadcast).
Tensor complex_polar(const Tensor& abs, const Tensor& angle);

// --- the cache of DFT matrices and twiddles ------------------------------------------------------
// Number of tensors held, and emptying it (the next transforms rebuild what they need). The cache
// only grows by itself, by the lengths used; clearing it frees tensors that a captured CUDA graph
// with a transform reads, so such a graph must not be replayed after a clear.
size_t fft_cache_size();
void fft_cache_clear();

}  // namespace kiln
