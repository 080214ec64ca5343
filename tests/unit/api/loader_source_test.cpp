// LoaderSource reads batches ahead of the loop (on a GPU it copies them there then): the loop
// still gets every batch of the epoch once, in order, and a batch that cannot be read fails
// when its turn comes, after the batches before it.
#include <gtest/gtest.h>

#include <cmath>

#include "stalepipe/api/loader_source.h"
#include "stalepipe/common/error.h"
#include "support/error_of.h"
#include "support/test_device.h"

namespace stalepipe {
namespace {

// 64 samples of 1 x 8 x 8, sample i filled with i; sample `bad` cannot be read.
class Numbered : public data::DecodingSource {
 public:
  explicit Numbered(int64_t bad) : bad_(bad), targets_(torch::arange(64) % 2) {}
  const std::string& name() const override { return name_; }
  int64_t size() const override { return 64; }
  int64_t channels() const override { return 1; }
  int64_t num_classes() const override { return 2; }
  const torch::Tensor& targets() const override { return targets_; }
  std::optional<std::pair<int64_t, int64_t>> common_size() const override { return std::make_pair(8, 8); }
  torch::Tensor decode(int64_t i) const override {
    if (i == bad_) throw RuntimeError(c10::str("numbered: sample ", i, " is damaged"));
    return torch::full({1, 8, 8}, i, torch::kUInt8);
  }

 private:
  std::string name_ = "numbered";
  int64_t bad_;
  torch::Tensor targets_;
};

data::Loader loader_of(int64_t bad) {
  return data::Loader(std::make_shared<Numbered>(bad), data::LoaderOptions().batch_size(8).seed(3));
}

// Sample i's number back from its first pixel (the loader scales to [0, 1]).
int64_t number(const torch::Tensor& x, int64_t i) { return std::lround(x[i][0][0][0].item<double>() * 255); }

// The first pixel of every sample of the epoch's batches from `first` on.
std::vector<int64_t> samples_read(const data::Loader& loader, int ahead, int64_t epoch, int64_t first) {
  LoaderSource source(loader, torch::kCPU, ahead);
  source.start_epoch(epoch, first);
  std::vector<int64_t> samples;
  for (exec::Input in = source.next(); in.x.defined(); in = source.next()) {
    EXPECT_EQ(in.ready, nullptr) << "a CPU batch is ready at once";
    for (int64_t i = 0; i < in.x.size(0); ++i) samples.push_back(number(in.x, i));
  }
  EXPECT_FALSE(source.next().x.defined()) << "after the last batch";
  return samples;
}

TEST(LoaderSource, ReadingAheadGivesEveryBatchOnceInOrder) {
  const data::Loader loader = loader_of(-1);
  const std::vector<int64_t> order = loader.epoch_order(1);
  const std::vector<int64_t> expected(order.begin() + 16, order.end());  // from batch 2 on
  for (const int ahead : {0, 2, 5, 20}) {
    EXPECT_EQ(samples_read(loader, ahead, 1, 2), expected) << "ahead " << ahead;
  }
  // A new epoch drops what was read ahead of the last one.
  LoaderSource source(loader, torch::kCPU, 3);
  source.start_epoch(0, 0);
  source.next();
  source.start_epoch(1, 7);
  const exec::Input last = source.next();
  ASSERT_TRUE(last.x.defined());
  EXPECT_EQ(number(last.x, 0), order[56]);
  EXPECT_FALSE(source.next().x.defined());
}

TEST(LoaderSource, ABatchThatCannotBeReadFailsInItsTurn) {
  const data::Loader probe = loader_of(-1);
  const int64_t bad = probe.epoch_order(0)[3 * 8 + 5];  // in batch 3
  const data::Loader loader = loader_of(bad);
  LoaderSource source(loader, torch::kCPU, 2);
  source.start_epoch(0, 0);
  for (int b = 0; b < 3; ++b) EXPECT_TRUE(source.next().x.defined()) << "batch " << b;
  const std::string error = test::error_of<RuntimeError>([&] { source.next(); });
  EXPECT_NE(error.find(c10::str("sample ", bad, " is damaged")), std::string::npos) << error;
  EXPECT_NE(test::error_of<UsageError>([&] { LoaderSource(loader, torch::kCPU, -1); }).find("ahead must be >= 0"),
            std::string::npos);
}

// A loader of raw pixels gives LoaderSource uint8 batches, which it normalises where they land
// (on a GPU test device, copied ahead on its own stream): the float batches, bit for bit.
TEST(LoaderSource, RawPixelsArriveNormalised) {
  const torch::Device device = test::test_device();
  const data::Normalization norm{{0.3}, {0.2}};
  const auto options = data::LoaderOptions().batch_size(8).seed(3).augment(true).pad_to(12).normalization(norm);
  const data::Loader floats(std::make_shared<Numbered>(-1), options);
  const data::Loader pixels(std::make_shared<Numbered>(-1), data::LoaderOptions(options).raw_pixels(true));
  LoaderSource source(pixels, device, 2);
  source.start_epoch(1, 0);
  for (int64_t b = 0; b < floats.batches_per_epoch(); ++b) {
    const exec::Input in = source.next();
    ASSERT_TRUE(in.x.defined());
    EXPECT_EQ(in.x.device(), device);
    if (in.ready) in.ready->synchronize();
    EXPECT_TRUE(torch::equal(in.x.cpu(), floats.batch(1, b).x)) << "batch " << b << " on " << device;
  }
  EXPECT_FALSE(source.next().x.defined());
}

}  // namespace
}  // namespace stalepipe
