#include "data/decode_pool_impl.h"

#include <atomic>
#include <exception>
#include <limits>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace detail {

struct DecodePool::Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t count = 0;
  std::atomic<int64_t> next{0};
  std::mutex mutex;  // guards the fields below
  std::condition_variable finished;
  int64_t done = 0;
  int64_t error_index = std::numeric_limits<int64_t>::max();
  std::exception_ptr error;
};

DecodePool::DecodePool(int threads) {
  SP_CHECK_ARG(threads >= 1, "decode threads must be >= 1, got ", threads);
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work(); });
}

DecodePool::~DecodePool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void DecodePool::drain(Job& job) {
  int64_t ran = 0;
  int64_t error_index = std::numeric_limits<int64_t>::max();
  std::exception_ptr error;
  for (int64_t i = job.next.fetch_add(1); i < job.count; i = job.next.fetch_add(1)) {
    try {
      (*job.fn)(i);
    } catch (...) {
      if (i < error_index) {
        error_index = i;
        error = std::current_exception();
      }
    }
    ++ran;
  }
  if (ran == 0) return;
  std::lock_guard<std::mutex> lock(job.mutex);
  if (error && error_index < job.error_index) {
    job.error_index = error_index;
    job.error = error;
  }
  job.done += ran;
  if (job.done == job.count) job.finished.notify_all();
}

void DecodePool::work() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = jobs_.front();
      // Every item of the front job is claimed once this worker and those before it are in.
      if (job->next.load() >= job->count) {
        jobs_.pop_front();
        continue;
      }
    }
    drain(*job);
  }
}

void DecodePool::run(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->count = count;
  if (!workers_.empty() && count > 1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(job);
    }
    wake_.notify_all();
  }
  drain(*job);
  std::unique_lock<std::mutex> lock(job->mutex);
  job->finished.wait(lock, [&] { return job->done == job->count; });
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
