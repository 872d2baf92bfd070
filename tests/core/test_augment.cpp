// augment_images on the CPU twin: pixels for given parameters against values computed here (exact
// for direct crops, flips and normalization, which are the same float operations; float64
// references with a tolerance for bilinear and jitter), the layouts and dtypes against each other,
// the Philox parameters' determinism and distributions, and bad input. The CUDA twin is held to
// this one in tests/cuda/test_augment_cuda.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "kernels/augment.h"
#include "tests/worst_ratio.h"

using namespace kiln;

namespace {

// A uint8 tensor of `shape` whose row-major element i is f(i) & 255.
template <typename F> Tensor bytes(const Shape& shape, F f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint8_t>(f(i) & 255);
  return from_blob(v.data(), shape, DType::UInt8, TensorOptions(DType::UInt8));
}

// Deterministic "random" bytes.
Tensor noise(const Shape& shape, uint32_t salt) {
  return bytes(shape, [salt](int64_t i) {
    return static_cast<int64_t>(philox_block(salt, 0, static_cast<uint64_t>(i)).v[0] >> 24);
  });
}

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

AugmentSpec base_spec(int64_t c, int64_t h, int64_t w) {
  AugmentSpec s;
  s.channels = c;
  s.height = h;
  s.width = w;
  s.out_height = h;
  s.out_width = w;
  return s;
}

// A float64 reference of the whole pipeline for given parameters: CHW uint8 values of one image.
std::vector<double> reference(const AugmentSpec& s, const AugmentParams& q, const std::vector<uint8_t>& img) {
  const int64_t C = s.channels, H = s.height, W = s.width, oh = s.out_height, ow = s.out_width;
  const bool bilinear = s.crop == AugmentCrop::ResizedCrop || s.crop == AugmentCrop::Resize;
  const int color = C >= 3 ? 3 : 1;
  auto px = [&](int64_t c, int64_t y, int64_t x) {
    return static_cast<double>(img[static_cast<size_t>((c * H + y) * W + x)]);
  };
  std::vector<double> v(static_cast<size_t>(C * oh * ow));
  auto at = [&](int64_t c, int64_t y, int64_t x) -> double& { return v[static_cast<size_t>((c * oh + y) * ow + x)]; };
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t xs = q.flip ? ow - 1 - x : x;
      for (int64_t c = 0; c < C; ++c) {
        double val;
        if (!bilinear) {
          const int64_t sy = q.top + y, sx = q.left + xs;
          val = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? px(c, sy, sx) / 255.0 : s.fill / 255.0;
        } else {
          const double fy = std::max(0.0, (y + 0.5) * q.height / oh - 0.5);
          const double fx = std::max(0.0, (xs + 0.5) * q.width / ow - 0.5);
          const int64_t y0 = std::min<int64_t>(static_cast<int64_t>(fy), q.height - 1);
          const int64_t x0 = std::min<int64_t>(static_cast<int64_t>(fx), q.width - 1);
          const int64_t y1 = std::min<int64_t>(y0 + 1, q.height - 1), x1 = std::min<int64_t>(x0 + 1, q.width - 1);
          const double ly = fy - y0, lx = fx - x0;
          auto p = [&](int64_t yy, int64_t xx) { return px(c, q.top + yy, q.left + xx); };
          val = ((1 - ly) * ((1 - lx) * p(y0, x0) + lx * p(y0, x1)) + ly * ((1 - lx) * p(y1, x0) + lx * p(y1, x1))) /
                255.0;
        }
        at(c, y, x) = val;
      }
    }
  }
  auto clamp01 = [](double a) { return std::min(1.0, std::max(0.0, a)); };
  auto gray = [&](int64_t y, int64_t x) {
    return color == 3 ? 0.299 * at(0, y, x) + 0.587 * at(1, y, x) + 0.114 * at(2, y, x) : at(0, y, x);
  };
  for (int64_t c = 0; c < color; ++c) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) at(c, y, x) = clamp01(at(c, y, x) * q.brightness);
    }
  }
  double mean = 0;
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) mean += gray(y, x);
  }
  mean /= static_cast<double>(oh * ow);
  for (int64_t c = 0; c < color; ++c) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) at(c, y, x) = clamp01(q.contrast * at(c, y, x) + (1 - q.contrast) * mean);
    }
  }
  if (color == 3) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const double g = gray(y, x);
        for (int64_t c = 0; c < 3; ++c) at(c, y, x) = clamp01(q.saturation * at(c, y, x) + (1 - q.saturation) * g);
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        at(c, y, x) = (at(c, y, x) - static_cast<float>(s.mean[c])) / static_cast<float>(s.std[c]);
      }
    }
  }
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double atol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t where = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) {  // a NaN too
      worst = test::worse(worst, d);
      where = i;
    }
  }
  INFO("worst difference " << worst << " at element " << where);
  CHECK(worst <= atol);
}

template <typename Fn> void check_error(Fn fn, std::vector<std::string> mentions) {
  try {
    fn();
    FAIL("no error thrown; expected one mentioning " << mentions[0]);
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    for (const std::string& m : mentions) CHECK(msg.find(m) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("augment: a given pad-crop box with flip and normalization, pixel by pixel", "[augment]") {
  const int64_t C = 3, H = 4, W = 5;
  const Tensor img = bytes({1, C, H, W}, [](int64_t i) { return 17 * i + 3; });
  AugmentSpec s = base_spec(C, H, W);
  s.crop = AugmentCrop::PadCrop;
  s.padding = 2;
  s.fill = 7;
  s.out_height = 4;
  s.out_width = 4;
  const double mean[3] = {0.5, 0.4, 0.3}, stdv[3] = {0.2, 0.25, 0.3};
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = mean[c];
    s.std[c] = stdv[c];
  }
  for (int flip = 0; flip < 2; ++flip) {
    INFO("flip " << flip);
    AugmentParams q;
    q.top = -1;
    q.left = 2;
    q.height = 4;
    q.width = 4;
    q.flip = flip;
    const std::vector<float> got = floats(augment_images_with_params(img, s, {q}));
    const std::vector<uint8_t> src = img.to_vector<uint8_t>();
    // By hand: output (c, y, x) reads input row y - 1 and column 2 + x (2 + 3 - x when flipped);
    // row -1 and columns 5.. are padding (7); the float operations are the kernel's own.
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t y = 0; y < 4; ++y) {
        for (int64_t x = 0; x < 4; ++x) {
          const int64_t sy = y - 1, sx = 2 + (flip ? 3 - x : x);
          const bool inside = sy >= 0 && sx < W;
          const float byte = inside ? static_cast<float>(src[static_cast<size_t>((c * H + sy) * W + sx)]) : 7.f;
          const float v = byte / 255.f;
          const float want = (v - static_cast<float>(mean[c])) / static_cast<float>(stdv[c]);
          INFO("c " << c << " y " << y << " x " << x);
          CHECK(got[static_cast<size_t>((c * 4 + y) * 4 + x)] == want);
        }
      }
    }
  }
  // Two spot values written out: (c 0, y 1, x 0) unflipped reads input (0, 0, 2) = 17 * 2 + 3 = 37.
  AugmentParams q{-1, 2, 4, 4, 0, 1.f, 1.f, 1.f};
  const std::vector<float> got = floats(augment_images_with_params(img, s, {q}));
  CHECK(got[4] == (37.f / 255.f - 0.5f) / 0.2f);
  CHECK(got[0] == (7.f / 255.f - 0.5f) / 0.2f);  // (0, 0, 0): row -1, padding
}

TEST_CASE("augment: a given resized-crop box, bilinear, against a float64 reference", "[augment]") {
  for (int64_t C : {1, 3}) {
    INFO("channels " << C);
    const int64_t H = 8, W = 9;
    const Tensor img = noise({1, C, H, W}, 11);
    for (auto [oh, ow] : {std::pair<int64_t, int64_t>{4, 3}, {7, 11}, {5, 6}}) {
      INFO("out " << oh << "x" << ow);
      AugmentSpec s = base_spec(C, H, W);
      s.crop = AugmentCrop::ResizedCrop;
      s.out_height = oh;
      s.out_width = ow;
      for (int flip = 0; flip < 2; ++flip) {
        const AugmentParams q{1, 2, 5, 6, flip, 1.f, 1.f, 1.f};
        const std::vector<float> got = floats(augment_images_with_params(img, s, {q}));
        check_close(got, reference(s, q, img.to_vector<uint8_t>()), 1e-5);  // float source coordinates
      }
    }
  }
  // A box the output's size is copied, not blended: a Resize to the input's own size is identity.
  const Tensor img = noise({1, 3, 6, 7}, 12);
  AugmentSpec s = base_spec(3, 6, 7);
  s.crop = AugmentCrop::Resize;
  const std::vector<float> got = floats(augment_images(img, s));
  const std::vector<uint8_t> src = img.to_vector<uint8_t>();
  for (size_t i = 0; i < src.size(); ++i) CHECK(got[i] == static_cast<float>(src[i]) / 255.f);
}

TEST_CASE("augment: each colour jitter alone and all three against a float64 reference", "[augment]") {
  const int64_t H = 6, W = 7;
  struct Case {
    const char* name;
    float b, c, s;
  };
  const Case cases[] = {{"brightness up (clamps)", 1.6f, 1.f, 1.f}, {"brightness down", 0.4f, 1.f, 1.f},
                        {"contrast down", 1.f, 0.3f, 1.f},          {"contrast up (clamps)", 1.f, 1.8f, 1.f},
                        {"saturation down", 1.f, 1.f, 0.2f},        {"saturation up (clamps)", 1.f, 1.f, 1.9f},
                        {"all three", 1.2f, 0.7f, 1.4f},            {"zero factors", 0.f, 0.f, 0.f}};
  for (int64_t C : {1, 3, 4}) {
    const Tensor img = noise({1, C, H, W}, 21 + static_cast<uint32_t>(C));
    AugmentSpec s = base_spec(C, H, W);
    s.mean[0] = 0.25;
    s.std[0] = 0.5;
    for (const Case& k : cases) {
      INFO(k.name << ", channels " << C);
      const AugmentParams q{0, 0, H, W, 0, k.b, k.c, k.s};
      const std::vector<float> got = floats(augment_images_with_params(img, s, {q}));
      // float rounding of a few operations, and contrast's mean taken in 2^-24 steps
      check_close(got, reference(s, q, img.to_vector<uint8_t>()), 2e-6);
    }
  }
  // RGBA: alpha is not jittered, only normalized.
  const Tensor img = noise({1, 4, H, W}, 30);
  const AugmentParams q{0, 0, H, W, 0, 1.5f, 0.5f, 1.5f};
  const std::vector<float> got = floats(augment_images_with_params(img, base_spec(4, H, W), {q}));
  const std::vector<uint8_t> src = img.to_vector<uint8_t>();
  for (int64_t i = 3 * H * W; i < 4 * H * W; ++i) {
    CHECK(got[static_cast<size_t>(i)] == static_cast<float>(src[static_cast<size_t>(i)]) / 255.f);
  }
}

TEST_CASE("augment: HWC and CHW inputs, NCHW and NHWC outputs, and 16-bit outputs agree", "[augment]") {
  const int64_t B = 5, C = 3, H = 9, W = 11;
  const Tensor chw = noise({B, C, H, W}, 40);
  const Tensor hwc = chw.permute({0, 2, 3, 1}).contiguous();
  for (AugmentCrop crop : {AugmentCrop::PadCrop, AugmentCrop::ResizedCrop, AugmentCrop::Center}) {
    INFO("crop " << static_cast<int>(crop));
    AugmentSpec s = base_spec(C, H, W);
    s.crop = crop;
    s.padding = 2;
    s.out_height = 7;
    s.out_width = 8;
    s.flip_p = 0.5;
    s.brightness = 0.4;
    s.contrast = 0.4;
    s.saturation = 0.4;
    s.mean[1] = 0.5;
    s.std[2] = 0.3;
    const std::vector<float> want = floats(augment_images(chw, s, Generator(7)));
    AugmentSpec h = s;
    h.input_layout = ImageLayout::HWC;
    CHECK(floats(augment_images(hwc, h, Generator(7))) == want);
    AugmentSpec n = s;
    n.out_layout = AugmentOutputLayout::NHWC;
    const Tensor nhwc = augment_images(chw, n, Generator(7));
    CHECK(nhwc.sizes() == Shape{B, C, 7, 8});
    CHECK(nhwc.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(floats(nhwc) == want);
    const Tensor f32 = augment_images(chw, s, Generator(7));
    for (DType t : {DType::Float16, DType::BFloat16}) {
      INFO(dtype_name(t));
      AugmentSpec d = s;
      d.out_dtype = t;
      const Tensor got = augment_images(chw, d, Generator(7));
      CHECK(got.dtype() == t);
      CHECK(floats(got) == floats(f32.to(t)));  // the float32 result rounded to nearest even
    }
  }
}

TEST_CASE("augment: draws are a function of (seed, offset, image index)", "[augment]") {
  const Tensor img = noise({16, 3, 12, 12}, 50);
  AugmentSpec s = base_spec(3, 12, 12);
  s.crop = AugmentCrop::ResizedCrop;
  s.out_height = 8;
  s.out_width = 8;
  s.flip_p = 0.5;
  s.brightness = 0.3;
  s.contrast = 0.3;
  s.saturation = 0.3;
  Generator g(123);
  const PhiloxState first = g.state();
  const Tensor a = augment_images(img, s, g);
  CHECK(g.state().offset == first.offset + 1);  // one draw per call
  const Tensor b = augment_images(img, s, g);
  CHECK(floats(a) == floats(augment_images(img, s, Generator(123))));
  CHECK(floats(a) != floats(b));
  // Image i's output is image i under augment_params(first)[i], whatever the batch around it.
  const std::vector<AugmentParams> params = augment_params(s, first, 16);
  CHECK(floats(augment_images_with_params(img, s, params)) == floats(a));
  const Tensor one = img.narrow(0, 5, 1);
  CHECK(floats(augment_images_with_params(one, s, {params[5]})) == floats(a.narrow(0, 5, 1)));
  // Different images get different parameters.
  int distinct_boxes = 0;
  for (size_t i = 1; i < params.size(); ++i) {
    distinct_boxes += params[i].top != params[0].top || params[i].left != params[0].left ||
                      params[i].height != params[0].height || params[i].width != params[0].width;
    CHECK(params[i].brightness != params[0].brightness);
  }
  CHECK(distinct_boxes >= 12);
  // The jitter factors lie in [1 - s, 1 + s].
  for (const AugmentParams& q : params) {
    for (float f : {q.brightness, q.contrast, q.saturation}) {
      CHECK(f >= 0.7f);
      CHECK(f <= 1.3f);
    }
  }
}

TEST_CASE("augment: the flip rate stays within binomial bounds", "[augment]") {
  const int64_t n = 20000;
  for (double p : {0.0, 0.2, 0.5, 1.0}) {
    INFO("p " << p);
    AugmentSpec s = base_spec(1, 4, 4);
    s.flip_p = p;
    const std::vector<AugmentParams> params = augment_params(s, PhiloxState{99, 3}, n);
    int64_t flips = 0;
    for (const AugmentParams& q : params) flips += q.flip;
    const double sigma = std::sqrt(n * p * (1 - p));
    CHECK(std::abs(static_cast<double>(flips) - n * p) <= 5 * sigma);
  }
}

TEST_CASE("augment: pad-crop positions are uniform over the (2p + 1)^2 windows", "[augment]") {
  const int64_t pad = 2, side = 2 * pad + 1, n = 25000;
  AugmentSpec s = base_spec(1, 28, 28);
  s.crop = AugmentCrop::PadCrop;
  s.padding = pad;
  const std::vector<AugmentParams> params = augment_params(s, PhiloxState{2024, 7}, n);
  std::vector<int64_t> count(static_cast<size_t>(side * side), 0);
  for (const AugmentParams& q : params) {
    REQUIRE(q.top >= -pad);
    REQUIRE(q.top <= pad);
    REQUIRE(q.left >= -pad);
    REQUIRE(q.left <= pad);
    CHECK(q.height == 28);
    ++count[static_cast<size_t>((q.top + pad) * side + q.left + pad)];
  }
  const double expected = static_cast<double>(n) / static_cast<double>(side * side);
  double chi2 = 0;
  for (int64_t c : count) chi2 += (c - expected) * (c - expected) / expected;
  // 24 degrees of freedom: mean 24, sd 6.9; 80 is beyond any plausible uniform draw.
  INFO("chi-square " << chi2);
  CHECK(chi2 < 80);
}

TEST_CASE("augment: random-resized-crop boxes respect the scale and ratio ranges", "[augment]") {
  const int64_t H = 32, W = 40;
  AugmentSpec s = base_spec(3, H, W);
  s.crop = AugmentCrop::ResizedCrop;
  s.scale_min = 0.2;
  s.scale_max = 0.7;
  s.ratio_min = 0.5;
  s.ratio_max = 2.0;
  s.out_height = 16;
  s.out_width = 16;
  const std::vector<AugmentParams> params = augment_params(s, PhiloxState{5, 0}, 4000);
  const double area = static_cast<double>(H * W);
  double min_share = 1, max_share = 0;
  for (const AugmentParams& q : params) {
    REQUIRE(q.height >= 1);
    REQUIRE(q.width >= 1);
    REQUIRE(q.top >= 0);
    REQUIRE(q.left >= 0);
    REQUIRE(q.top + q.height <= H);
    REQUIRE(q.left + q.width <= W);
    // w and h are rounded from sqrt(area * ratio) and sqrt(area / ratio): half a pixel each
    const double h = static_cast<double>(q.height), w = static_cast<double>(q.width);
    CHECK((w + 0.5) * (h + 0.5) >= s.scale_min * area);
    CHECK((w - 0.5) * (h - 0.5) <= s.scale_max * area);
    CHECK((w + 0.5) / (h - 0.5) >= s.ratio_min);
    CHECK((w - 0.5) / (h + 0.5) <= s.ratio_max);
    min_share = std::min(min_share, w * h / area);
    max_share = std::max(max_share, w * h / area);
  }
  CHECK(min_share < 0.25);  // the range is explored, not one corner of it
  CHECK(max_share > 0.6);
  // No attempt fits a 10x100 image at 90% of its area with a ratio near 1: torchvision's fallback,
  // the widest centered box of ratio 4/3: h 10, w round(13.33) = 13, centered.
  AugmentSpec f = base_spec(1, 10, 100);
  f.crop = AugmentCrop::ResizedCrop;
  f.scale_min = 0.9;
  f.scale_max = 1.0;
  f.out_height = 4;
  f.out_width = 4;
  for (const AugmentParams& q : augment_params(f, PhiloxState{8, 1}, 50)) {
    CHECK(q.top == 0);
    CHECK(q.height == 10);
    CHECK(q.width == 13);
    CHECK(q.left == 43);
  }
}

TEST_CASE("augment: the shared exp is libm's to double rounding", "[augment]") {
  double worst = 0;
  for (double x = -5; x <= 5; x += 0.001) {
    worst = std::max(worst, std::abs(augment_detail::exp_exact(x) / std::exp(x) - 1));
  }
  CHECK(worst < 1e-15);
  CHECK(augment_detail::exp_exact(0) == 1.0);
}

TEST_CASE("augment: center crop and no-op specs", "[augment]") {
  const Tensor img = noise({2, 1, 7, 8}, 60);
  AugmentSpec s = base_spec(1, 7, 8);
  s.crop = AugmentCrop::Center;
  s.out_height = 4;
  s.out_width = 5;
  const std::vector<float> got = floats(augment_images(img, s));
  const std::vector<uint8_t> src = img.to_vector<uint8_t>();
  // torchvision: top = round((7 - 4) / 2) = round(1.5) = 2 (half to even), left = round(1.5) = 2
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t y = 0; y < 4; ++y) {
      for (int64_t x = 0; x < 5; ++x) {
        CHECK(got[static_cast<size_t>((b * 4 + y) * 5 + x)] ==
              static_cast<float>(src[static_cast<size_t>((b * 7 + y + 2) * 8 + x + 2)]) / 255.f);
      }
    }
  }
  const Tensor same = augment_images(img, base_spec(1, 7, 8));
  const std::vector<float> v = floats(same);
  for (size_t i = 0; i < src.size(); ++i) CHECK(v[i] == static_cast<float>(src[i]) / 255.f);
  CHECK(augment_images(empty({0, 1, 7, 8}, DType::UInt8), base_spec(1, 7, 8)).sizes() == Shape{0, 1, 7, 8});
}

TEST_CASE("augment: bad input is an error naming augment_images and the values", "[augment]") {
  const Tensor img = zeros({2, 3, 8, 8}, DType::UInt8);
  const AugmentSpec ok = base_spec(3, 8, 8);
  check_error([&] { augment_images(zeros({2, 3, 8, 8}), ok); }, {"augment_images", "uint8", "float32"});
  check_error([&] { augment_images(zeros({3, 8, 8}, DType::UInt8), ok); }, {"augment_images", "[3, 8, 8]"});
  check_error([&] { augment_images(zeros({2, 8, 8, 3}, DType::UInt8), ok); }, {"augment_images", "[2, 8, 8, 3]"});
  auto with = [&](auto change) {
    AugmentSpec s = ok;
    change(s);
    return s;
  };
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.channels = 5; })); }, {"augment_images", "5"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.out_height = 0; })); }, {"augment_images", "0x8"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.out_width = 6; })); },
              {"augment_images", "8x8 -> 8x6"});
  check_error(
      [&] {
        augment_images(img, with([](AugmentSpec& s) {
                         s.crop = AugmentCrop::PadCrop;
                         s.padding = 1;
                         s.out_height = 11;
                       }));
      },
      {"augment_images", "11x8", "10x10"});
  check_error(
      [&] {
        augment_images(img, with([](AugmentSpec& s) {
                         s.crop = AugmentCrop::ResizedCrop;
                         s.scale_min = 0.9;
                         s.scale_max = 0.5;
                       }));
      },
      {"augment_images", "scale", "0.9", "0.5"});
  check_error(
      [&] {
        augment_images(img, with([](AugmentSpec& s) {
                         s.crop = AugmentCrop::ResizedCrop;
                         s.ratio_min = -1;
                       }));
      },
      {"augment_images", "ratio", "-1"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.std[1] = 0; })); },
              {"augment_images", "std[1]", "0"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.flip_p = 1.5; })); }, {"augment_images", "1.5"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.contrast = -0.5; })); },
              {"augment_images", "contrast", "-0.5"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.out_dtype = DType::Float64; })); },
              {"augment_images", "float64"});
  check_error([&] { augment_images(img, with([](AugmentSpec& s) { s.out_dtype = DType::UInt8; })); },
              {"augment_images", "uint8"});
  check_error(
      [&] {
        augment_images(img, with([](AugmentSpec& s) {
                         s.crop = AugmentCrop::Center;
                         s.out_height = 9;
                       }));
      },
      {"augment_images", "9x8"});
  check_error([&] { augment_images_with_params(img, ok, {AugmentParams{0, 0, 8, 8}}); },
              {"augment_images", "1 parameter sets", "2 images"});
  AugmentSpec rrc = ok;
  rrc.crop = AugmentCrop::ResizedCrop;
  check_error([&] { augment_images_with_params(img, rrc, {AugmentParams{0, 0, 8, 8}, AugmentParams{2, 0, 7, 8}}); },
              {"augment_images", "top 2", "7x8", "image 1"});
  check_error(
      [&] {
        augment_images_with_params(img, ok, {AugmentParams{0, 0, 8, 8}, AugmentParams{0, 0, 8, 8, 0, -1.f, 1.f, 1.f}});
      },
      {"augment_images", "image 1", "-1"});
}
