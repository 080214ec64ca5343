// A stand-in for GPU streams on the CPU that checks how work crosses between them.
//
// While a StreamChecker lives, every CPU stream (exec::make_stream, exec::current_stream) is
// one of its own: each has an identity, and each LibTorch operation a thread runs belongs to
// the stream that thread has entered (DeviceStream::enter), else to the device's default
// stream. The checker watches every operation (a RecordFunction callback) and keeps, per
// tensor storage, the stream and the point of its last write and of each stream's reads since.
// A read or write on another stream must come after the last write, and a write after every
// other stream's reads, as the streams' events say: a wait for an event recorded after it
// (DeviceStream::record, wait), a join of the current stream, or a host synchronisation
// (DeviceStream::synchronize, StreamEvent::synchronize).
//
// It also keeps the stream whose operation made each storage: a GPU's caching allocator gives
// the memory back to that stream when the last tensor on it goes, and reuses it for that
// stream's next allocation. A storage another stream used is therefore either held by that
// stream (DeviceStream::hold, the allocator's record_stream) or, by the owner's next operation
// after it is freed, the owner is ordered after that use.
//
// Anything else is what would race on a GPU, and is reported as such, although on the CPU the
// work ran in order. Only threads that entered one of its streams, the thread that made the
// checker and threads that call watch_this_thread() are watched (not LibTorch's intra-op
// threads or a loader's decoders); a watched thread outside any stream works on the default
// stream. One checker at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace stalepipe::test {

class StreamChecker {
 public:
  StreamChecker();
  ~StreamChecker();
  StreamChecker(const StreamChecker&) = delete;
  StreamChecker& operator=(const StreamChecker&) = delete;

  // One line per kind of unordered access seen so far: the operation, the streams, how often.
  std::vector<std::string> races() const;

  // Watches the calling thread (a reader thread of the test's own) while a checker lives.
  static void watch_this_thread();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace stalepipe::test
