#include "process_group_impl.h"

#include <thread>
#include <vector>

namespace stalepipe::exec {
namespace {

std::string wait_key(int rank) { return c10::str("stalepipe/waits/", rank); }
std::string failure_key(int rank) { return c10::str("stalepipe/failed/", rank); }

}  // namespace

WaitWatch::WaitWatch(StoreCalls& store, int rank, int size, std::chrono::milliseconds timeout)
    : store_(store), rank_(rank), size_(size), timeout_(timeout), thread_([this] { run(); }) {}

WaitWatch::~WaitWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

WaitWatch::Scope::Scope(WaitWatch* watch, int peer) : watch_(peer != -1 ? watch : nullptr) {
  if (!watch_) return;
  std::lock_guard<std::mutex> lock(watch_->mutex_);
  watch_->peer_ = peer;
  watch_->since_ = std::chrono::steady_clock::now();
}

WaitWatch::Scope::~Scope() {
  if (!watch_) return;
  std::lock_guard<std::mutex> lock(watch_->mutex_);
  watch_->peer_ = -1;
}

// Records a wait once it has lasted a third of the timeout, and takes the record back once it
// is over; the store is touched only then, never per message.
void WaitWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!closing_) {
    changed_.wait_for(lock, std::chrono::milliseconds(100));
    const bool long_wait = peer_ != -1 && std::chrono::steady_clock::now() - since_ > timeout_ / 3;
    const int record = long_wait ? peer_ : -1;
    if (record == recorded_) continue;
    lock.unlock();
    try {
      const std::string key = wait_key(rank_), value = std::to_string(record);
      if (record != -1) {
        store_.run([key, value](c10d::Store& s) { s.set(key, std::vector<uint8_t>(value.begin(), value.end())); },
                   kStoreReply);
      } else {
        store_.run([key](c10d::Store& s) { s.deleteKey(key); }, kStoreReply);
      }
    } catch (const std::exception&) {
      // The store is out of reach: the waits of this rank stay unknown to the others.
    }
    lock.lock();
    recorded_ = record;
  }
}

int WaitWatch::silent_one(int peer) const {
  std::set<int> seen{rank_};
  int p = peer;
  try {
    while (p >= 0 && !seen.count(p) && store_.has(wait_key(p), std::chrono::milliseconds(200))) {
      seen.insert(p);
      const auto value = store_.run([key = wait_key(p)](c10d::Store& s) { return s.get(key); }, kStoreReply);
      p = std::stoi(std::string(value.begin(), value.end()));
    }
  } catch (const std::exception&) {
    // A record went away meanwhile: the chain ends where it could be read.
  }
  return p == kAnyRank ? unrecorded_rank(seen) : p;
}

// The records are there already: a rank in the collective recorded its wait a third of the
// timeout ago, and a rank records its failure before its wait ends.
int WaitWatch::unrecorded_rank(const std::set<int>& skip) const {
  constexpr std::chrono::milliseconds kThere{1};
  for (int r = 0; r < size_; ++r) {
    if (!skip.count(r) && !store_.has(wait_key(r), kThere) && !store_.has(failure_key(r), kThere)) return r;
  }
  return -1;
}

int WaitWatch::gone_from_collective(std::chrono::milliseconds patience) const {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  constexpr std::chrono::milliseconds kThere{1};
  try {
    while (true) {
      std::vector<int> unrecorded;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && !store_.has(failure_key(r), kThere)) unrecorded.push_back(r);
      }
      if (unrecorded.size() == 1) return unrecorded[0];
      if (unrecorded.empty() || std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception&) {
    return -1;  // the store went away: no one to name
  }
}

void WaitWatch::record_failure() const {
  store_.run([key = failure_key(rank_)](c10d::Store& s) { s.set(key, std::vector<uint8_t>{1}); },
             kStoreReply);
}

int WaitWatch::failed_replica(int rank, int partitions, int replicas) const {
  for (int r = 0; r < replicas; ++r) {
    const int peer = r * partitions + rank % partitions;
    if (peer != rank && store_.has(failure_key(peer), std::chrono::milliseconds(1))) return peer;
  }
  return -1;
}

bool WaitWatch::store_answers() const { return store_.has("stalepipe/compared", std::chrono::milliseconds(500)); }

}  // namespace stalepipe::exec
