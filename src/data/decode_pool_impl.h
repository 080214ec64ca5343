// Threads that decode the samples of a batch side by side.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace stalepipe {
namespace data {
namespace detail {

class DecodePool {
 public:
  // `threads` >= 1 decode at once: threads - 1 of the pool's own and the caller of run().
  explicit DecodePool(int threads);
  ~DecodePool();
  DecodePool(const DecodePool&) = delete;
  DecodePool& operator=(const DecodePool&) = delete;

  // Calls fn(i) for every i in [0, count) and returns when all calls have returned. Several
  // callers may run jobs at once. If calls throw, rethrows the exception of the lowest i
  // (the same one whatever the timing) after every call has finished.
  void run(int64_t count, const std::function<void(int64_t)>& fn);

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

 private:
  struct Job;
  void work();
  // Runs items of `job` until none is left to claim.
  static void drain(Job& job);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;  // jobs with items left to claim
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
