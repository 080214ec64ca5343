// A bounded, blocking, multi-producer multi-consumer FIFO queue.
//
// Used for pipeline registers between worker threads and for the data prefetcher.
// Blocking calls wait on condition variables (no busy waiting).
//
// Closing: close() wakes every waiter. After close(), push() returns false and drops the item;
// pop() keeps returning queued items, then std::nullopt once the queue is empty. So a consumer
// can tell "no more items" (nullopt) from an item, and an aborting pipeline can unblock all
// of its threads by closing all of its channels.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace stalepipe {

template <typename T>
class Channel {
 public:
  // capacity >= 1: the number of items that may wait in the queue before push() blocks.
  explicit Channel(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Blocks while the queue is full. Returns false (and drops item) if the channel is closed.
  bool push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) {
      return false;
    }
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  // Blocks while the queue is empty and open. Returns nullopt once closed and drained.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) {
      return std::nullopt;
    }
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace stalepipe
