// A stand-in for GPU streams on the CPU that checks how work crosses between them.
//
// While a StreamChecker lives, every CPU stream (exec::make_stream, exec::current_stream) is
// one of its own: each has an identity, and each LibTorch operation a thread runs belongs to
// the stream that thread has entered (DeviceStream::enter), else to the device's default
// stream. The checker watches every operation (a RecordFunction callback) and keeps, per
// tensor storage, the stream and the point of its last write. A read or write on another
// stream must come after that point as the streams' events say: a wait for an event recorded
// after the write (DeviceStream::record, wait), a join of the current stream, or a host
// synchronisation (DeviceStream::synchronize, StreamEvent::synchronize). Anything else is
// what would race on a GPU, and is reported as such, although on the CPU the work ran in order.
//
// Only threads that entered one of its streams, and the thread that made the checker, are
// watched (not LibTorch's intra-op threads or a loader's decoders). One checker at a time.
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

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace stalepipe::test
