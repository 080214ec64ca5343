#include "data/decode_pool_impl.h"

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace stalepipe::data::detail {
namespace {

TEST(DecodePool, RunsEveryItemOnceFromSeveralCallersAtOnce) {
  DecodePool pool(3);
  std::vector<std::thread> callers;
  std::vector<std::vector<std::atomic<int>>> seen(4);
  for (auto& s : seen) s = std::vector<std::atomic<int>>(500);
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] { pool.run(500, [&](int64_t i) { ++seen[c][i]; }); });
  }
  for (auto& t : callers) t.join();
  for (const auto& s : seen) {
    for (const auto& n : s) EXPECT_EQ(n.load(), 1);
  }
}

TEST(DecodePool, RethrowsTheErrorOfTheLowestItemAfterAllFinished) {
  for (int threads : {1, 4}) {
    DecodePool pool(threads);
    std::atomic<int> ran{0};
    try {
      pool.run(100, [&](int64_t i) {
        ++ran;
        if (i == 70 || i == 30 || i == 90) throw std::runtime_error("item " + std::to_string(i));
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "item 30");
    }
    EXPECT_EQ(ran.load(), 100);
  }
}

}  // namespace
}  // namespace stalepipe::data::detail
