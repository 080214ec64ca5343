#include "stalepipe/data/loader.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/data/synthetic.h"
#include "support/data_files.h"

namespace stalepipe {
namespace data {
namespace {

using test::throws_with;

// n samples of shape [c, h, w]; every pixel of sample i is (i % 255) + 1, so x * 255 - 1 is the
// sample id (for n <= 255) and no pixel is 0 (padding is recognisable).
Dataset indexed(int64_t n, int64_t c = 1, int64_t h = 4, int64_t w = 4) {
  Dataset data;
  data.images = (torch::arange(n, torch::kInt64) % 255 + 1)
                    .to(torch::kUInt8)
                    .view({n, 1, 1, 1})
                    .expand({n, c, h, w})
                    .contiguous();
  data.labels = torch::arange(n, torch::kInt64) % 10;
  data.name = "indexed";
  return data;
}

Dataset synthetic(int64_t n, int64_t c = 1, int64_t side = 12) {
  return make_synthetic(
      SyntheticOptions().train_size(n).test_size(1).channels(c).height(side).width(side)).train;
}

std::vector<int64_t> ids_of(const Batch& batch) {
  const torch::Tensor ids = (batch.x.select(1, 0).select(1, 0).select(1, 0) * 255 - 1).round();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ids.size(0); ++i) {
    out.push_back(ids[i].item<int64_t>());
  }
  return out;
}

TEST(LoaderTest, EpochOrderIsASeededPermutation) {
  const Loader loader(indexed(100), LoaderOptions().seed(3));
  const std::vector<int64_t> e0 = loader.epoch_order(0), e1 = loader.epoch_order(1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(e0, identity);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, loader.epoch_order(0));
  EXPECT_EQ(e1, Loader(indexed(100), LoaderOptions().seed(3)).epoch_order(1));
  EXPECT_NE(e0, Loader(indexed(100), LoaderOptions().seed(4)).epoch_order(0));
  EXPECT_EQ(Loader(indexed(100), LoaderOptions().shuffle(false)).epoch_order(5), identity);
  EXPECT_THROW(loader.epoch_order(-1), UsageError);
}

TEST(LoaderTest, BatchesFollowTheOrderAndAreReproducible) {
  const Loader loader(indexed(10), LoaderOptions().batch_size(4).seed(1));
  ASSERT_EQ(loader.batches_per_epoch(), 3);
  const std::vector<int64_t> order = loader.epoch_order(2);
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < 3; ++b) {
    const Batch batch = loader.batch(2, b, order);
    EXPECT_EQ(batch.epoch, 2);
    EXPECT_EQ(batch.index, b);
    EXPECT_EQ(batch.x.scalar_type(), torch::kFloat32);
    EXPECT_EQ(batch.y.scalar_type(), torch::kInt64);
    const std::vector<int64_t> ids = ids_of(batch);
    seen.insert(seen.end(), ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(batch.y[i].item<int64_t>(), ids[i] % 10);
    }
  }
  EXPECT_EQ(seen, order);

  const Batch a = loader.batch(2, 1);
  const Batch b = Loader(indexed(10), LoaderOptions().batch_size(4).seed(1)).batch(2, 1);
  EXPECT_TRUE(torch::equal(a.x, loader.batch(2, 1).x));
  EXPECT_TRUE(torch::equal(a.x, b.x));
  EXPECT_TRUE(torch::equal(a.y, b.y));
}

TEST(LoaderTest, LastBatchKeptOrDropped) {
  const Loader keep(indexed(10), LoaderOptions().batch_size(4));
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  EXPECT_EQ(keep.batch(0, 0).x.sizes(), (std::vector<int64_t>{4, 1, 4, 4}));
  EXPECT_EQ(keep.batch(0, 2).x.size(0), 2);
  EXPECT_EQ(keep.batch(0, 2).y.size(0), 2);
  const Loader drop(indexed(10), LoaderOptions().batch_size(4).drop_last(true));
  EXPECT_EQ(drop.batches_per_epoch(), 2);
  EXPECT_EQ(drop.batch(0, 1).x.size(0), 4);
  EXPECT_THROW(drop.batch(0, 2), UsageError);
  EXPECT_THROW(keep.batch(0, -1), UsageError);
  EXPECT_EQ(Loader(indexed(8), LoaderOptions().batch_size(4).drop_last(true)).batches_per_epoch(), 2);
  EXPECT_EQ(Loader(indexed(3), LoaderOptions().batch_size(4)).batches_per_epoch(), 1);
  EXPECT_TRUE(throws_with<UsageError>(
      [] { Loader(indexed(3), LoaderOptions().batch_size(4).drop_last(true)); },
      {"drop_last", "batch size 4", "only 3 samples"}));
}

TEST(LoaderTest, RejectsBadOptions) {
  EXPECT_TRUE(throws_with<UsageError>([] { Loader(indexed(3), LoaderOptions().batch_size(0)); },
      {"batch size must be >= 1, got 0"}));
  EXPECT_TRUE(throws_with<UsageError>([] { Loader(indexed(3).subset(0), LoaderOptions()); },
      {"empty"}));
  EXPECT_THROW(Loader(Dataset(), LoaderOptions()), UsageError);
  EXPECT_THROW(Loader(indexed(3), LoaderOptions().pad_to(-1)), UsageError);
  EXPECT_TRUE(throws_with<UsageError>(
      [] { Loader(indexed(3), LoaderOptions().normalization({{0.5, 0.5}, {0.2, 0.2}})); },
      {"expected 1 means and stds"}));
  EXPECT_THROW(Loader(indexed(3), LoaderOptions().normalization({{0.5}, {0.0}})), UsageError);
  const Loader loader(indexed(3), LoaderOptions());
  EXPECT_THROW(loader.batch(0, 0, {0, 1}), UsageError);
  EXPECT_THROW(loader.batch(0, 0, {0, 1, 3}), UsageError);
}

TEST(LoaderTest, PadToCentresWithRawZeros) {
  const Normalization norm{{0.5}, {0.25}};
  const Loader loader(indexed(6, 1, 28, 28),
      LoaderOptions().batch_size(6).shuffle(false).pad_to(32).normalization(norm));
  EXPECT_EQ(loader.output_shape(), (std::vector<int64_t>{1, 32, 32}));
  const torch::Tensor x = loader.batch(0, 0).x;
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{6, 1, 32, 32}));
  const float pad = static_cast<float>((0.0 - 0.5) / 0.25);
  const torch::Tensor inner = x.narrow(2, 2, 28).narrow(3, 2, 28);
  const torch::Tensor border_mask = torch::ones({32, 32}, torch::kBool);
  border_mask.narrow(0, 2, 28).narrow(1, 2, 28).fill_(false);
  EXPECT_TRUE(torch::allclose(x.masked_select(border_mask), torch::full({6 * 240}, pad)));
  // The inside is the unpadded, normalised image.
  const torch::Tensor plain =
      Loader(indexed(6, 1, 28, 28), LoaderOptions().batch_size(6).shuffle(false).normalization(norm))
          .batch(0, 0).x;
  EXPECT_TRUE(torch::allclose(inner, plain));
  EXPECT_NEAR(plain[1][0][5][5].item<float>(), (2 / 255.0 - 0.5) / 0.25, 1e-5);
  // Images already as large as pad_to are left alone.
  EXPECT_EQ(Loader(indexed(2, 3, 32, 32), LoaderOptions().pad_to(32)).output_shape(),
      (std::vector<int64_t>{3, 32, 32}));
}

TEST(LoaderTest, AugmentationIsDeterministicPerSample) {
  const Dataset data = synthetic(40, 3);
  const auto options = LoaderOptions().batch_size(8).seed(5).augment(true);
  const Loader loader(data, options);
  const Batch a = loader.batch(1, 2);
  EXPECT_TRUE(torch::equal(a.x, loader.batch(1, 2).x));
  EXPECT_TRUE(torch::equal(a.x, Loader(data, options).batch(1, 2).x));
  EXPECT_EQ(a.x.sizes(), (std::vector<int64_t>{8, 3, 12, 12}));

  const Batch plain = Loader(data, LoaderOptions(options).augment(false)).batch(1, 2);
  EXPECT_TRUE(torch::equal(a.y, plain.y));
  EXPECT_FALSE(torch::equal(a.x, plain.x));
  // A shift brings in zero rows or columns for most samples; every value stays a pixel value.
  EXPECT_GT(a.x.eq(0).sum().item<int64_t>(), 0);
  EXPECT_TRUE(torch::allclose(a.x * 255, (a.x * 255).round(), 0, 1e-3));

  // The same sample gets the same augmentation whatever batch it lands in...
  const std::vector<int64_t> order = loader.epoch_order(1);
  const Loader other(data, LoaderOptions(options).batch_size(5));
  // Sample order[19]: batch 2 row 3 above (batches of 8), batch 3 row 4 here (batches of 5).
  EXPECT_TRUE(torch::equal(a.x[3], other.batch(1, 3, order).x[4]));
  // ...and a different one in another epoch (same samples, same positions).
  EXPECT_FALSE(torch::equal(a.x, loader.batch(2, 2, order).x));
}

TEST(LoaderTest, NormalisationGivesZeroMeanUnitStd) {
  const Dataset data = synthetic(200, 3);
  const Normalization norm = compute_normalization(data);
  const Loader loader(data, LoaderOptions().batch_size(64).normalization(norm));
  std::vector<torch::Tensor> xs;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    xs.push_back(loader.batch(0, b).x);
  }
  const torch::Tensor x = torch::cat(xs).to(torch::kDouble).transpose(0, 1).flatten(1);
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(x[c].mean().item<double>(), 0.0, 1e-5);
    EXPECT_NEAR(x[c].std(false).item<double>(), 1.0, 1e-5);
  }
}

TEST(LoaderTest, ConcurrentCallsMatchSerialOnes) {
  const Loader loader(synthetic(64), LoaderOptions().batch_size(8).augment(true));
  std::vector<torch::Tensor> serial;
  for (int64_t b = 0; b < 8; ++b) {
    serial.push_back(loader.batch(0, b).x);
  }
  std::vector<torch::Tensor> parallel(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<int64_t> order = loader.epoch_order(0);
      for (int64_t b = t; b < 8; b += 4) {
        parallel[b] = loader.batch(0, b, order).x;
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (int64_t b = 0; b < 8; ++b) {
    EXPECT_TRUE(torch::equal(serial[b], parallel[b])) << "batch " << b;
  }
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
