#include "stalepipe/api/ahead_batches.h"

#include "stalepipe/common/error.h"
#include "stalepipe/exec/device_stream.h"

namespace stalepipe {

AheadBatches::~AheadBatches() { stop_reading(); }

void AheadBatches::stop_reading() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& reader : readers_) reader.join();
  readers_.clear();
}

void AheadBatches::start_reading(int64_t first) {
  stop_reading();
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
  ready_.clear();
  next_to_read_ = next_to_give_ = first;
  end_ = -1;
  for (int t = 0; t < threads_; ++t) readers_.emplace_back([this] { read_loop(); });
}

void AheadBatches::read_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || next_to_read_ < next_to_give_ + ahead_; });
    if (stopping_ || (end_ >= 0 && next_to_read_ >= end_)) return;
    const int64_t index = next_to_read_++;
    lock.unlock();
    Slot slot;
    try {
      slot.input = produce(index);
      // produce() wrote the batch on this thread's current stream (a Dataset that moves its
      // samples to a GPU): partition 1's stream reads it after this event.
      if (slot.input.x.defined() && !slot.input.ready) {
        slot.input.ready = exec::current_stream(slot.input.x.device())->record();
      }
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    // An undefined x ends the epoch; so does an error (given back at its turn), for the reads after it.
    if ((!slot.input.x.defined() || slot.error) && (end_ < 0 || index + 1 < end_)) end_ = index + 1;
    ready_[index] = std::move(slot);
    changed_.notify_all();
  }
}

exec::Input AheadBatches::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  SP_CHECK(!readers_.empty(), "next() before start_epoch()");
  if (end_ >= 0 && next_to_give_ >= end_) return {};
  changed_.wait(lock, [&] { return ready_.count(next_to_give_) > 0; });
  Slot slot = std::move(ready_[next_to_give_]);
  ready_.erase(next_to_give_++);
  changed_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.input);
}

}  // namespace stalepipe
