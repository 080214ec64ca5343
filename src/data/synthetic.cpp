#include "stalepipe/data/synthetic.h"

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

}  // namespace

DataSplit make_synthetic(const SyntheticOptions& options) {
  check_range("train_size", options.train_size(), 1, int64_t{1} << 32);
  check_range("test_size", options.test_size(), 1, int64_t{1} << 32);
  check_range("channels", options.channels(), 1, 64);
  check_range("height", options.height(), 1, 1024);
  check_range("width", options.width(), 1, 1024);
  check_range("num_classes", options.num_classes(), 1, 256);
  const std::vector<uint8_t> prototypes = make_prototypes(options);
  DataSplit split;
  split.train = make_split(options, prototypes, options.train_size(), kTrainTag, "synthetic/train");
  split.test = make_split(options, prototypes, options.test_size(), kTestTag, "synthetic/test");
  return split;
}

}  // namespace data
}  // namespace stalepipe
