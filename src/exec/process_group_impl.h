// ProcessGroup's c10d objects, shared by the files that implement it (processes.cpp, the
// point-to-point messages and the pipeline; replica_group.cpp, the replicas' collectives).
// Private to src/exec; only these files include Gloo's headers (Debian's LibTorch is built with
// Gloo, but ProcessGroupGloo.hpp hides its contents unless USE_C10D_GLOO is defined).
#pragma once

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/error_text_impl.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {

// "rank 2 (partition 3)", or with replicas "rank 5 (replica 2, partition 3)" (1-based numbers
// of partitions and replicas, as the user counts them); "a rank" for a negative rank.
std::string describe(int rank, int partitions, int replicas);

// Which peer this rank waits for, told to the others when a wait lasts: a rank that times out
// waiting for a peer that itself waits for a third rank (a cascade behind a silent rank or a
// cut link) follows the recorded waits and names the rank at their end, the silent one. A wait
// that lasts a third of the timeout is written to the store ("stalepipe/waits/<rank>" = the
// peer) by a thread of its own, and removed when it ends; the store is not touched per message.
class WaitWatch {
 public:
  WaitWatch(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout);
  ~WaitWatch();
  // While it lives, this rank waits for `peer` (a negative peer: not recorded).
  class Scope {
   public:
    Scope(WaitWatch* watch, int peer);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WaitWatch* watch_;
  };
  // The end of the recorded waits from `peer` (peer itself when it records none).
  int silent_one(int peer) const;
  // Whether the store (on rank 0's host) answers within half a second.
  bool store_answers() const;
  // A rank records here that it failed (ProcessGroup::fail); failed_replica gives another
  // replica of `rank`'s partition that did (-1: none, or the store is out of reach).
  void record_failure() const;
  int failed_replica(int rank, int partitions, int replicas) const;

 private:
  void run();
  bool has(const std::string& key, std::chrono::milliseconds within) const;
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
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
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  // Sends are posted at once and waited for, in order, by the reaper thread, which only
  // releases their tensors: delivery never waits for the reaper.
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<PendingSend> pending;
  bool busy = false, closing = false;
  std::string error;  // first failure of a send, with the peer named
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
        if (!send.work->wait(timeout)) throw std::runtime_error("the send was aborted");
      } catch (const std::exception& e) {
        failure = c10::str(describe(send.peer, partitions, replicas), " did not take a message within ",
                           timeout_seconds, " s (it died, hangs or failed): ", e.what());
      }
      send = PendingSend();
      lock.lock();
      busy = false;
      if (!failure.empty() && error.empty()) error = failure;
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
