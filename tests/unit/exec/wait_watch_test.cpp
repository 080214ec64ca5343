// Which rank a timed-out wait names (src/exec/wait_watch.cpp), read from the records the ranks
// leave in the rendezvous store, and the bounded store calls those are read with.
#include <gtest/gtest.h>

#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "exec/process_group_impl.h"

namespace stalepipe::exec {
namespace {

using std::chrono::milliseconds;

class WaitWatchTest : public ::testing::Test {
 protected:
  void waits(int rank, int peer) { set(c10::str("stalepipe/waits/", rank), std::to_string(peer)); }
  void failed(int rank) { set(c10::str("stalepipe/failed/", rank), "1"); }
  void set(const std::string& key, const std::string& value) {
    calls_.run([key, bytes = std::vector<uint8_t>(value.begin(), value.end())](c10d::Store& s) { s.set(key, bytes); },
               milliseconds(2000));
  }
  // A TCPStore on a free port, as the ranks use.
  c10::intrusive_ptr<c10d::Store> store_ = c10::make_intrusive<c10d::TCPStore>(
      "127.0.0.1", c10d::TCPStoreOptions{/*port=*/0, /*isServer=*/true, /*numWorkers=*/c10::nullopt,
                                         /*waitWorkers=*/false, /*timeout=*/milliseconds(5000)});
  StoreCalls calls_{store_};
  WaitWatch watch_{calls_, /*rank=*/0, /*size=*/5, milliseconds(3000)};
};

// A key looked for in vain, set afterwards, must not disturb the calls that follow (a timed-out
// TCPStore wait would leave its waiter with the server, which answers once the key is set).
TEST_F(WaitWatchTest, AKeyLookedForInVainThenSetLeavesLaterCallsTheirAnswers) {
  set("there", "yes");
  EXPECT_FALSE(calls_.has("late", milliseconds(50)));
  set("late", "now");
  for (int i = 0; i < 3; ++i) {
    const auto value = calls_.run([](c10d::Store& s) { return s.get("there"); }, milliseconds(2000));
    EXPECT_EQ(std::string(value.begin(), value.end()), "yes");
  }
  EXPECT_TRUE(calls_.has("late", milliseconds(50)));
}

TEST_F(WaitWatchTest, AChainOfWaitsEndsAtTheRankThatRecordsNone) {
  waits(1, 2);
  waits(2, 3);
  EXPECT_EQ(watch_.silent_one(1), 3);
  EXPECT_EQ(watch_.silent_one(4), 4);
  waits(3, 0);  // back to this rank: a cycle ends where it closes
  EXPECT_EQ(watch_.silent_one(1), 0);
}

// A rank cut off from the store records nothing: the ranks waiting in a collective beside it,
// or failed already, are not the silent one.
TEST_F(WaitWatchTest, ACollectiveNamesTheFirstRankWithNoRecord) {
  waits(1, WaitWatch::kAnyRank);
  failed(2);
  EXPECT_EQ(watch_.silent_one(WaitWatch::kAnyRank), 3);
  waits(3, WaitWatch::kAnyRank);
  EXPECT_EQ(watch_.silent_one(WaitWatch::kAnyRank), 4);
  waits(4, 1);
  EXPECT_EQ(watch_.silent_one(WaitWatch::kAnyRank), -1) << "every other rank left a record";
}

// A lost connection in a collective: the rank gone is the one that never records a failure
// while the others do; with two or more unrecorded at the deadline, no one is named.
TEST_F(WaitWatchTest, ALostCollectiveNamesTheOneRankThatRecordsNoFailure) {
  failed(1);
  failed(3);
  EXPECT_EQ(watch_.gone_from_collective(milliseconds(100)), -1) << "ranks 2 and 4 both unrecorded";
  std::thread late([this] {
    std::this_thread::sleep_for(milliseconds(150));
    failed(4);
  });
  EXPECT_EQ(watch_.gone_from_collective(milliseconds(2000)), 2) << "rank 4's record came late";
  late.join();
  failed(2);
  EXPECT_EQ(watch_.gone_from_collective(milliseconds(100)), -1) << "every other rank failed";
}

TEST_F(WaitWatchTest, AChainEndingInACollectiveNamesARankOutsideTheChain) {
  waits(1, 2);
  waits(2, WaitWatch::kAnyRank);
  waits(3, WaitWatch::kAnyRank);
  EXPECT_EQ(watch_.silent_one(1), 4);
}

// The watch records a wait once it has lasted a third of the timeout, and takes it back after.
TEST_F(WaitWatchTest, ALongWaitInACollectiveGoesOnRecordAndOffAgain) {
  WaitWatch other(calls_, /*rank=*/3, /*size=*/5, milliseconds(300));
  {
    const WaitWatch::Scope waiting(&other, WaitWatch::kAnyRank);
    ASSERT_TRUE(calls_.has("stalepipe/waits/3", milliseconds(2000)));
    const auto value = store_->get("stalepipe/waits/3");
    EXPECT_EQ(std::string(value.begin(), value.end()), std::to_string(WaitWatch::kAnyRank));
  }
  for (int i = 0; i < 100 && store_->check({"stalepipe/waits/3"}); ++i) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(store_->check({"stalepipe/waits/3"}));
}

}  // namespace
}  // namespace stalepipe::exec
