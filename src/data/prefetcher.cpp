#include <chrono>

#include "stalepipe/common/error.h"
#include "stalepipe/data/loader.h"

namespace stalepipe {
namespace data {

Prefetcher::Prefetcher(const Loader& loader, int64_t epoch, int64_t begin, int64_t end,
    size_t depth)
    : loader_(loader), epoch_(epoch), begin_(begin), end_(end), channel_(depth) {
  SP_CHECK_ARG(epoch >= 0, "prefetcher: epoch must be >= 0, got ", epoch);
  SP_CHECK_ARG(0 <= begin && begin <= end && end <= loader.batches_per_epoch(),
      "prefetcher: expected batches 0 <= begin <= end <= ", loader.batches_per_epoch(),
      ", got [", begin, ", ", end, ")");
  SP_CHECK_ARG(depth >= 1, "prefetcher: depth must be >= 1, got ", depth);
  thread_ = std::thread([this] { produce(); });
}

Prefetcher::~Prefetcher() {
  // Unblocks a producer waiting in push(); it then sees push() fail and returns.
  channel_.close();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Prefetcher::produce() {
  int64_t index = begin_;
  try {
    if (begin_ < end_) {
      const std::vector<int64_t> order = loader_.epoch_order(epoch_);
      for (; index < end_; ++index) {
        const auto start = std::chrono::steady_clock::now();
        Batch batch = loader_.batch(epoch_, index, order);
        busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
        images_ += batch.x.size(0);
        if (!channel_.push(std::move(batch))) {
          break;  // closed: the consumer has gone
        }
      }
    }
  } catch (...) {
    error_ = std::current_exception();
    failed_index_ = index;
  }
  channel_.close();
}

double Prefetcher::images_per_second() const {
  const int64_t ns = busy_ns_.load();
  return ns > 0 ? 1e9 * static_cast<double>(images_.load()) / static_cast<double>(ns) : 0;
}

std::optional<Batch> Prefetcher::next() {
  std::optional<Batch> batch = channel_.pop();
  if (batch || !error_) {
    return batch;
  }
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    throw RuntimeError(c10::str("prefetching batch ", failed_index_, " of epoch ", epoch_,
        " failed: ", e.what()));
  } catch (...) {
    throw RuntimeError(c10::str("prefetching batch ", failed_index_, " of epoch ", epoch_,
        " failed with an unknown exception"));
  }
}

}  // namespace data
}  // namespace stalepipe
