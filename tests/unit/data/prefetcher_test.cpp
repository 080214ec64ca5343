#include <chrono>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/synthetic.h"
#include "support/data_files.h"

namespace stalepipe {
namespace data {
namespace {

using test::throws_with;

Loader make_loader(int64_t n = 100, int64_t batch_size = 8) {
  return Loader(make_synthetic(SyntheticOptions().train_size(n).test_size(1).height(8).width(8)).train,
      LoaderOptions().batch_size(batch_size).seed(11).augment(true));
}

TEST(PrefetcherTest, YieldsTheDirectBatchesInOrder) {
  const Loader loader = make_loader();  // 13 batches
  Prefetcher prefetcher(loader, 3, 2, 9, 2);
  for (int64_t b = 2; b < 9; ++b) {
    std::optional<Batch> batch = prefetcher.next();
    ASSERT_TRUE(batch.has_value()) << "batch " << b;
    EXPECT_EQ(batch->epoch, 3);
    EXPECT_EQ(batch->index, b);
    const Batch direct = loader.batch(3, b);
    EXPECT_TRUE(torch::equal(batch->x, direct.x));
    EXPECT_TRUE(torch::equal(batch->y, direct.y));
  }
  EXPECT_FALSE(prefetcher.next().has_value());
  EXPECT_FALSE(prefetcher.next().has_value());
}

TEST(PrefetcherTest, WholeEpochAndEmptyRange) {
  const Loader loader = make_loader();
  Prefetcher all(loader, 0, 0, loader.batches_per_epoch());
  int64_t count = 0;
  int64_t samples = 0;
  while (std::optional<Batch> batch = all.next()) {
    EXPECT_EQ(batch->index, count++);
    samples += batch->x.size(0);
  }
  EXPECT_EQ(count, 13);
  EXPECT_EQ(samples, 100);
  Prefetcher none(loader, 0, 4, 4);
  EXPECT_FALSE(none.next().has_value());
}

TEST(PrefetcherTest, DestructorReturnsPromptlyWhenTheConsumerStopsEarly) {
  const Loader loader = make_loader(4000, 4);  // 1000 batches; the producer blocks on a full channel
  const auto start = std::chrono::steady_clock::now();
  {
    Prefetcher prefetcher(loader, 0, 0, loader.batches_per_epoch(), 1);
    ASSERT_TRUE(prefetcher.next().has_value());
  }
  {
    Prefetcher unread(loader, 0, 0, loader.batches_per_epoch(), 1);  // never consumed
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
}

TEST(PrefetcherTest, RejectsABadRange) {
  const Loader loader = make_loader();
  EXPECT_THROW(Prefetcher(loader, 0, 5, 4), UsageError);
  EXPECT_THROW(Prefetcher(loader, 0, 0, 14), UsageError);
  EXPECT_THROW(Prefetcher(loader, -1, 0, 1), UsageError);
  EXPECT_THROW(Prefetcher(loader, 0, 0, 1, 0), UsageError);
}

TEST(PrefetcherTest, RethrowsTheProducersError) {
  Dataset data = make_synthetic(SyntheticOptions().train_size(20).test_size(1)).train;
  const Loader loader(data, LoaderOptions().batch_size(4).shuffle(false));
  // The loader shares the label tensor; shrinking it behind the loader's back makes batch 1's
  // index_select fail inside the producer thread.
  data.labels.resize_({4});
  Prefetcher prefetcher(loader, 0, 0, 5);
  ASSERT_TRUE(prefetcher.next().has_value());  // batch 0 only needs labels 0..3
  EXPECT_TRUE(throws_with<RuntimeError>([&] { prefetcher.next(); },
      {"prefetching batch 1 of epoch 0 failed"}));
  EXPECT_THROW(prefetcher.next(), RuntimeError);
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
