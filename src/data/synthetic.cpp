#include "stalepipe/data/synthetic.h"

#include <algorithm>
#include <random>
#include <vector>

#include "data/random_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

constexpr int64_t kBlock = 4;       // prototype block side in pixels
constexpr int64_t kNoiseHalf = 64;  // noise is uniform in [-kNoiseHalf, kNoiseHalf - 1]

// Generator seeds for the three streams of one seed.
constexpr uint64_t kPrototypeTag = 1;
constexpr uint64_t kTrainTag = 2;
constexpr uint64_t kTestTag = 3;

void check_range(const char* what, int64_t value, int64_t lo, int64_t hi) {
  SP_CHECK_ARG(value >= lo && value <= hi, "synthetic data: ", what, " must be in ", lo, "..",
      hi, ", got ", value);
}

// [num_classes, C, H, W] prototypes: one random byte per kBlock x kBlock block and channel.
std::vector<uint8_t> make_prototypes(const SyntheticOptions& options) {
  const int64_t c = options.channels(), h = options.height(), w = options.width();
  const int64_t bh = (h + kBlock - 1) / kBlock, bw = (w + kBlock - 1) / kBlock;
  std::mt19937_64 rng(detail::mix_seed(
      detail::mix_seed(options.seed(), detail::kSyntheticStream), kPrototypeTag));
  std::vector<uint8_t> prototypes(options.num_classes() * c * h * w);
  std::vector<uint8_t> blocks(bh * bw);
  for (int64_t k = 0; k < options.num_classes(); ++k) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (uint8_t& block : blocks) {
        block = static_cast<uint8_t>(rng() >> 56);
      }
      uint8_t* plane = prototypes.data() + (k * c + ch) * h * w;
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          plane[y * w + x] = blocks[(y / kBlock) * bw + x / kBlock];
        }
      }
    }
  }
  return prototypes;
}

Dataset make_split(const SyntheticOptions& options, const std::vector<uint8_t>& prototypes,
    int64_t size, uint64_t tag, const std::string& name) {
  const int64_t pixels = options.channels() * options.height() * options.width();
  std::mt19937_64 rng(detail::mix_seed(
      detail::mix_seed(options.seed(), detail::kSyntheticStream), tag));
  Dataset data;
  data.images = torch::empty({size, options.channels(), options.height(), options.width()},
      torch::kUInt8);
  data.labels = torch::empty({size}, torch::kInt64);
  data.num_classes = options.num_classes();
  data.name = name;
  uint8_t* images = data.images.data_ptr<uint8_t>();
  int64_t* labels = data.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < size; ++i) {
    const int64_t label = static_cast<int64_t>(detail::uniform_below(rng, options.num_classes()));
    labels[i] = label;
    const uint8_t* prototype = prototypes.data() + label * pixels;
    uint8_t* image = images + i * pixels;
    // One 64-bit draw gives noise for 8 pixels: each byte's top 7 bits are uniform on 0..127.
    uint64_t bits = 0;
    for (int64_t p = 0; p < pixels; ++p) {
      if (p % 8 == 0) {
        bits = rng();
      }
      const int64_t noise = static_cast<int64_t>((bits & 0xff) >> 1) - kNoiseHalf;
      bits >>= 8;
      const int64_t value = prototype[p] + noise;
      image[p] = static_cast<uint8_t>(value < 0 ? 0 : (value > 255 ? 255 : value));
    }
  }
  return data;
}

// Each sample: background (class 0) and 1-3 rectangles of random classes 1..C-1 painted in
// turn, each class at its own brightness, plus the same noise as above.
Dataset make_masks_split(const SyntheticOptions& options, int64_t size, uint64_t tag, const std::string& name) {
  const int64_t c = options.channels(), h = options.height(), w = options.width(), classes = options.num_classes();
  std::mt19937_64 rng(detail::mix_seed(detail::mix_seed(options.seed(), detail::kSyntheticStream), tag));
  Dataset data;
  data.images = torch::empty({size, c, h, w}, torch::kUInt8);
  data.labels = torch::zeros({size, h, w}, torch::kInt64);
  data.num_classes = classes;
  data.name = name;
  for (int64_t i = 0; i < size; ++i) {
    int64_t* mask = data.labels.data_ptr<int64_t>() + i * h * w;
    const int64_t shapes = 1 + static_cast<int64_t>(detail::uniform_below(rng, 3));
    for (int64_t r = 0; r < shapes; ++r) {
      const int64_t label = 1 + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(classes - 1)));
      const int64_t rh = 1 + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(std::max<int64_t>(1, h / 2))));
      const int64_t rw = 1 + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(std::max<int64_t>(1, w / 2))));
      const int64_t y0 = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(h - rh + 1)));
      const int64_t x0 = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(w - rw + 1)));
      for (int64_t y = y0; y < y0 + rh; ++y) {
        for (int64_t x = x0; x < x0 + rw; ++x) mask[y * w + x] = label;
      }
    }
    uint8_t* image = data.images.data_ptr<uint8_t>() + i * c * h * w;
    uint64_t bits = 0;
    for (int64_t p = 0; p < c * h * w; ++p) {
      if (p % 8 == 0) bits = rng();
      const int64_t noise = static_cast<int64_t>((bits & 0xff) >> 1) - kNoiseHalf;
      bits >>= 8;
      const int64_t value = 32 + 191 * mask[p % (h * w)] / (classes - 1) + noise;
      image[p] = static_cast<uint8_t>(value < 0 ? 0 : (value > 255 ? 255 : value));
    }
  }
  return data;
}

void check_options(const SyntheticOptions& options) {
  check_range("train_size", options.train_size(), 1, int64_t{1} << 32);
  check_range("test_size", options.test_size(), 1, int64_t{1} << 32);
  check_range("channels", options.channels(), 1, 64);
  check_range("height", options.height(), 1, 1024);
  check_range("width", options.width(), 1, 1024);
  check_range("num_classes", options.num_classes(), 1, 256);
}

}  // namespace

DataSplit make_synthetic_masks(const SyntheticOptions& options) {
  check_options(options);
  check_range("num_classes", options.num_classes(), 2, 256);
  DataSplit split;
  split.train = make_masks_split(options, options.train_size(), kTrainTag, "synthetic-masks/train");
  split.test = make_masks_split(options, options.test_size(), kTestTag, "synthetic-masks/test");
  return split;
}

DataSplit make_synthetic(const SyntheticOptions& options) {
  check_options(options);
  const std::vector<uint8_t> prototypes = make_prototypes(options);
  DataSplit split;
  split.train = make_split(options, prototypes, options.train_size(), kTrainTag, "synthetic/train");
  split.test = make_split(options, prototypes, options.test_size(), kTestTag, "synthetic/test");
  return split;
}

}  // namespace data
}  // namespace stalepipe
