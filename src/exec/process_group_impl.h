// ProcessGroup's c10d objects, shared by the files that implement it (processes.cpp, the
// point-to-point messages and the pipeline; replica_group.cpp, the replicas' collectives).
// Private to src/exec; only these files include Gloo's headers (Debian's LibTorch is built with
// Gloo, but ProcessGroupGloo.hpp hides its contents unless USE_C10D_GLOO is defined).
#pragma once

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/error_text_impl.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {

// "rank 2 (partition 3)", or with replicas "rank 5 (replica 2, partition 3)" (1-based numbers
// of partitions and replicas, as the user counts them); "a rank" for a negative rank.
std::string describe(int rank, int partitions, int replicas);

// How long a reply of a store that answers may take, on top of the wait a call asks for.
constexpr std::chrono::milliseconds kStoreReply{2000};
// How long a rank that lost a connection in a collective waits for the others' failure records
// before it names no one (WaitWatch::gone_from_collective): they fail as their own
// connections to the gone rank close, within a second even on a loaded machine.
constexpr std::chrono::milliseconds kGoneFromCollectivePatience{3000};

// Our calls to the rendezvous store, each with a deadline. LibTorch 2.x's TCPStore client reads
// some replies without a timeout (the cancellation of a wait that timed out), so behind a cut
// link one call would hold its caller for good, and every later call, which takes its turn
// after it. Each call here runs on a thread of its own: one that misses its deadline is left to
// itself (it ends with the process, and holds the store alive until then), the store counts as
// out of reach from then on, and that call and every later one throw std::runtime_error at once.
class StoreCalls {
 public:
  explicit StoreCalls(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  // op(store), within `within`. `op` is copied to the call's thread: capture by value.
  template <typename Op>
  auto run(Op op, std::chrono::milliseconds within) -> decltype(op(std::declval<c10d::Store&>())) {
    using Result = decltype(op(std::declval<c10d::Store&>()));
    if (lost_) throw std::runtime_error("the store is out of reach (an earlier call got no answer)");
    auto task = std::make_shared<std::packaged_task<Result()>>([store = store_, op = std::move(op)] { return op(*store); });
    std::future<Result> result = task->get_future();
    std::thread([task] { (*task)(); }).detach();
    if (result.wait_for(within) != std::future_status::ready) {
      lost_ = true;
      throw std::runtime_error(c10::str("the store did not answer within ", within.count(), " ms"));
    }
    return result.get();
  }

  // Whether `key` is in the store, or appears within `within`; false where the store is out of
  // reach. Polled with check(), never a store wait: a TCPStore wait that times out leaves its
  // waiter with the server, whose late answer (once the key is set) LibTorch 1.13's client reads
  // as the reply to a later call, and 2.x's client cancels it and awaits that without a timeout.
  bool has(const std::string& key, std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    try {
      while (!run([key](c10d::Store& s) { return s.check({key}); }, kStoreReply)) {
        const auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) return false;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(10)));
      }
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::atomic<bool> lost_{false};
};

// Which peer this rank waits for, told to the others when a wait lasts: a rank that times out
// waiting for a peer that itself waits for a third rank (a cascade behind a silent rank or a
// cut link) follows the recorded waits and names the rank at their end, the silent one. A wait
// that lasts a third of the timeout is written to the store ("stalepipe/waits/<rank>" = the
// peer) by a thread of its own, and removed when it ends; the store is not touched per message.
// A collective over every rank waits for no one peer (Gloo relays it): its silent one is a
// rank that has recorded neither a wait nor a failure, as a rank cut off from the store cannot.
class WaitWatch {
 public:
  // The peer of a collective over all `size` ranks.
  static constexpr int kAnyRank = -2;
  WaitWatch(StoreCalls& store, int rank, int size, std::chrono::milliseconds timeout);
  ~WaitWatch();
  // While it lives, this rank waits for `peer` (-1: not recorded).
  class Scope {
   public:
    Scope(WaitWatch* watch, int peer);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WaitWatch* watch_;
  };
  // The end of the recorded waits from `peer` (peer itself when it records none); -1 if that
  // end is a collective and every other rank has recorded something.
  int silent_one(int peer) const;
  // After this rank lost a connection in a collective over every rank (which names no peer):
  // the one other rank that records no failure once all the rest have (the ranks that lose
  // their connections to a dead rank fail and record it; the dead rank never does), waiting up
  // to `patience` for the records; -1 where more than one rank stays unrecorded.
  int gone_from_collective(std::chrono::milliseconds patience) const;
  // Whether the store (on rank 0's host) answers within half a second.
  bool store_answers() const;
  // A rank records here that it failed (ProcessGroup::fail); failed_replica gives another
  // replica of `rank`'s partition that did (-1: none, or the store is out of reach).
  void record_failure() const;
  int failed_replica(int rank, int partitions, int replicas) const;

 private:
  void run();
  int unrecorded_rank(const std::set<int>& skip) const;
  StoreCalls& store_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int peer_ = -1, recorded_ = -1;
  std::chrono::steady_clock::time_point since_;
  bool closing_ = false;
  std::thread thread_;
};

// A send still in flight: the tensor must outlive it.
struct PendingSend {
  torch::Tensor tensor;
  c10::intrusive_ptr<c10d::Work> work;
  int peer = 0;
};

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;  // for Gloo's rendezvous
  std::unique_ptr<StoreCalls> calls;      // ours, on the same store
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  // Sends are posted at once and waited for, in order, by the reaper thread, which only
  // releases their tensors: delivery never waits for the reaper.
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<PendingSend> pending;
  bool busy = false, closing = false;
  std::string error;  // first failure of a send (Gloo's words), to `error_peer`
  int error_peer = -1;
  std::thread reaper;
  int partitions = 1;  // of each replica: rank r x partitions + k runs partition k of replica r
  int replicas = 1;
  // The ranks of this rank's partition in every replica (replica order), for the gradient sums.
  c10::intrusive_ptr<c10d::ProcessGroupGloo> replica_group;
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options;  // the devices both groups use
  std::unique_ptr<WaitWatch> watch;

  void reap(std::chrono::milliseconds timeout, int timeout_seconds) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return closing || !pending.empty(); });
      if (pending.empty()) return;
      PendingSend send = std::move(pending.front());
      pending.pop_front();
      busy = true;
      lock.unlock();
      std::string failure;
      try {
        if (!send.work->wait(timeout)) throw std::runtime_error("the send was aborted (connection closed)");
      } catch (const std::exception& e) {
        failure = e.what();
      }
      const int peer = send.peer;
      send = PendingSend();
      lock.lock();
      busy = false;
      if (!failure.empty() && error.empty()) {
        error = failure;
        error_peer = peer;
      }
      changed.notify_all();
    }
  }
};


struct ProcessGroup::PendingGather {
  std::vector<std::vector<torch::Tensor>> outputs;  // [0][replica]
  std::vector<torch::Tensor> input;
  c10::intrusive_ptr<c10d::Work> work;
};

}  // namespace stalepipe::exec
