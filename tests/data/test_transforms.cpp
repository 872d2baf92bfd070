// transforms::Compose: the canonical order and its errors, the fused spec, the per-sample path
// (one draw of the sample generator, the same pixels as the batch kernel under that draw), use as
// a data::Transform, and the layouts.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/dataset.h"
#include "data/transforms.h"

using namespace kiln;
using namespace kiln::data;
namespace T = kiln::data::transforms;

namespace {

Tensor noise(const Shape& shape, uint32_t salt) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint8_t>(philox_block(salt, 1, i).v[1]);
  return from_blob(v.data(), shape, DType::UInt8, TensorOptions(DType::UInt8));
}

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

T::Compose fashion_mnist() {
  return T::Compose({T::RandomCrop(28, 2), T::RandomHorizontalFlip(), T::Normalize({0.2860}, {0.3530})});
}

}  // namespace

TEST_CASE("transforms: Compose fuses its steps into one spec", "[transforms]") {
  const AugmentSpec s = fashion_mnist().spec(1, 28, 28);
  CHECK(s.crop == AugmentCrop::PadCrop);
  CHECK(s.padding == 2);
  CHECK(s.out_height == 28);
  CHECK(s.out_width == 28);
  CHECK(s.flip_p == 0.5);
  CHECK(s.mean[0] == 0.2860);
  CHECK(s.std[0] == 0.3530);
  CHECK(s.out_dtype == DType::Float32);
  CHECK(s.input_layout == ImageLayout::CHW);

  const T::Compose rgb({T::RandomResizedCrop(16, {0.25, 1.0}), T::RandomHorizontalFlip(0.3),
                        T::ColorJitter(0.4, 0.3, 0.2), T::Normalize({0.5}, {0.25}), T::ToDtype(DType::BFloat16)},
                       ImageLayout::HWC, MemoryFormat::ChannelsLast);
  const AugmentSpec r = rgb.spec(3, 40, 30);
  CHECK(r.crop == AugmentCrop::ResizedCrop);
  CHECK(r.scale_min == 0.25);
  CHECK(r.ratio_max == 4.0 / 3.0);
  CHECK(r.out_height == 16);
  CHECK(r.flip_p == 0.3);
  CHECK(r.brightness == 0.4);
  CHECK(r.contrast == 0.3);
  CHECK(r.saturation == 0.2);
  for (int c = 0; c < 3; ++c) CHECK(r.mean[c] == 0.5);  // one value for every channel
  CHECK(r.out_dtype == DType::BFloat16);
  CHECK(r.input_layout == ImageLayout::HWC);
  CHECK(r.out_layout == AugmentOutputLayout::NHWC);
  // No geometric step: the output keeps the input's size.
  CHECK(T::Compose({T::ColorJitter(0.1)}).spec(3, 5, 7).out_width == 7);
}

TEST_CASE("transforms: Compose accepts the canonical order only", "[transforms]") {
  const std::string wrong = error_of([] { T::Compose({T::Normalize({0.5}, {0.5}), T::RandomCrop(8)}); });
  CHECK(wrong.find("transforms::Compose") != std::string::npos);
  CHECK(wrong.find("[Normalize, RandomCrop]") != std::string::npos);
  const std::string twice = error_of([] { T::Compose({T::RandomHorizontalFlip(), T::RandomHorizontalFlip()}); });
  CHECK(twice.find("[RandomHorizontalFlip, RandomHorizontalFlip]") != std::string::npos);
  const std::string two_crops = error_of([] { T::Compose({T::CenterCrop(8), T::RandomResizedCrop(4)}); });
  CHECK(two_crops.find("[CenterCrop, RandomResizedCrop]") != std::string::npos);
  const std::string jitter_first = error_of([] { T::Compose({T::ColorJitter(0.2), T::RandomHorizontalFlip()}); });
  CHECK(jitter_first.find("[ColorJitter, RandomHorizontalFlip]") != std::string::npos);
  // ToDtype goes anywhere.
  CHECK(error_of([] { T::Compose({T::ToDtype(DType::Float16), T::RandomCrop(8), T::Normalize({0}, {1})}); }).empty());
  // Bad values fail where the Compose is built, naming the value.
  CHECK(error_of([] { T::Compose({T::RandomHorizontalFlip(2.0)}); }).find("2") != std::string::npos);
  CHECK(error_of([] { T::Compose({T::Normalize({0.5, 0.5}, {0.5})}); }).find("2 means and 1 stds") !=
        std::string::npos);
  CHECK(error_of([] { T::Compose({T::ToDtype(DType::Int64)}); }).find("int64") != std::string::npos);
  // A scale from 0, as torchvision takes it: a box too small for a pixel is one more failed attempt,
  // and with every attempt failed the fallback is the whole (square) image.
  const Tensor square = noise({3, 8, 8}, 5);
  CHECK(T::Compose({T::RandomResizedCrop(4, {0.0, 1.0})})(square).sizes() == Shape{3, 4, 4});
  CHECK(floats(T::Compose({T::RandomResizedCrop(4, {0.0, 0.0})})(square)) ==
        floats(T::Compose({T::RandomResizedCrop(4, {1.0, 1.0}, {1.0, 1.0})})(square)));
  CHECK(error_of([] { T::Compose({T::RandomResizedCrop(4, {-0.1, 1.0})}); }).find("0 <= min") != std::string::npos);
  CHECK(error_of([] {
          T::Compose({T::RandomResizedCrop(4, {0.1, 1.0}, {0.0, 2.0})});
        }).find("ratio range") != std::string::npos);
  // Normalize's channels must match the image's.
  const T::Compose three({T::Normalize({0.1, 0.2, 0.3}, {1, 1, 1})});
  CHECK(error_of([&] { three(noise({1, 4, 4}, 1)); }).find("3 means and stds for an image of 1 channels") !=
        std::string::npos);
  CHECK(error_of([&] { three(noise({3, 4, 4}, 1).to(DType::Float32)); }).find("uint8") != std::string::npos);
  CHECK(error_of([&] { three(noise({1, 3, 4, 4}, 1)); }).find("3-d") != std::string::npos);
  CHECK(error_of([&] { T::Compose({T::RandomCrop(40, 2)})(noise({1, 28, 28}, 1)); }).find("40x40") !=
        std::string::npos);
}

TEST_CASE("transforms: a sample draws once from the sample generator and matches the batch kernel", "[transforms]") {
  const T::Compose compose({T::RandomResizedCrop(12), T::RandomHorizontalFlip(), T::ColorJitter(0.4, 0.4, 0.4),
                            T::Normalize({0.4, 0.5, 0.6}, {0.2, 0.3, 0.4})});
  const Tensor img = noise({3, 20, 17}, 7);
  for (int64_t index = 0; index < 4; ++index) {
    SampleGeneratorScope scope(42, 1, index);
    const PhiloxState before = sample_generator().state();
    const Tensor out = compose(img);
    CHECK(sample_generator().state().offset == before.offset + 1);
    CHECK(out.sizes() == Shape{3, 12, 12});
    CHECK(out.dtype() == DType::Float32);
    Generator g;
    g.set_state(before);
    CHECK(floats(out) == floats(compose.apply_batch(img.unsqueeze(0), g)));
  }
  // A sample's output depends on (seed, epoch, index) only.
  auto sample = [&](int64_t epoch, int64_t index) {
    SampleGeneratorScope scope(42, epoch, index);
    return floats(compose(img));
  };
  CHECK(sample(1, 2) == sample(1, 2));
  CHECK(sample(1, 2) != sample(1, 3));
  CHECK(sample(1, 2) != sample(2, 2));
  // A strided sample (a view into a batch) reads its own pixels.
  const Tensor batch = noise({4, 3, 20, 17}, 8);
  const Tensor hwc_view = batch.permute({0, 2, 3, 1}).contiguous().select(0, 2).permute({2, 0, 1});
  SampleGeneratorScope s1(1, 0, 0);
  const std::vector<float> strided = floats(compose(hwc_view));
  SampleGeneratorScope s2(1, 0, 0);
  CHECK(strided == floats(compose(batch.select(0, 2))));
}

TEST_CASE("transforms: Compose is a data::Transform, and its layouts agree", "[transforms]") {
  const T::Compose compose = fashion_mnist();
  const T::Compose copy = compose;
  Transform t = copy;
  const Tensor img = noise({1, 28, 28}, 9);
  std::vector<float> a, b;
  {
    SampleGeneratorScope scope(3, 0, 5);
    a = floats(t(img));
  }
  {
    SampleGeneratorScope scope(3, 0, 5);
    b = floats(compose(img));
  }
  CHECK(a == b);
  // A TransformDataset applies it per sample.
  auto base = std::make_shared<TensorDataset>(noise({6, 1, 28, 28}, 10), Tensor());
  TransformDataset ds(base, compose);
  CHECK(ds.get(3).data.sizes() == Shape{1, 28, 28});

  const T::Compose chw({T::CenterCrop(10), T::RandomHorizontalFlip(), T::ColorJitter(0.3, 0.3, 0.3)});
  const T::Compose hwc({T::CenterCrop(10), T::RandomHorizontalFlip(), T::ColorJitter(0.3, 0.3, 0.3)},
                       ImageLayout::HWC, MemoryFormat::ChannelsLast);
  const Tensor rgb = noise({3, 14, 12}, 11);
  std::vector<float> x, y;
  Tensor last;
  {
    SampleGeneratorScope scope(4, 0, 1);
    x = floats(chw(rgb));
  }
  {
    SampleGeneratorScope scope(4, 0, 1);
    last = hwc(rgb.permute({1, 2, 0}).contiguous());
    y = floats(last);
  }
  CHECK(x == y);
  CHECK(last.sizes() == Shape{3, 10, 10});
  CHECK(last.strides() == Shape{1, 30, 3});
  // The batch path: [B, C, H, W] in, one draw of the given generator.
  Generator g(77);
  const Tensor out = chw.apply_batch(noise({5, 3, 14, 12}, 12), g);
  CHECK(out.sizes() == Shape{5, 3, 10, 10});
  CHECK(g.state().offset == 1);
  CHECK(error_of([&] { chw.apply_batch(rgb); }).find("4-d") != std::string::npos);
}
