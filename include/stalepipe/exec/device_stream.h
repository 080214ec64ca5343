// The stream a partition's work runs on, and the events that order two streams without
// synchronising a device.
//
// Each partition (exec::Stage) queues its forward, backward and update on its own stream, so
// partitions that share a GPU overlap; a pipeline register crosses streams with an event
// (recorded where the tensor is produced, waited for where it is consumed). On the CPU work
// runs in program order on the calling thread, so the CPU stream does nothing, except that
// waiting for a GPU event blocks the host until that event has happened (the data then is
// where a CPU partition may read it). c10's generic stream and event calls throw on a
// CPU-only LibTorch, hence this small interface of our own.
#pragma once

#include <memory>

#include <torch/types.h>

namespace stalepipe::exec {

// A point in a stream's queue of work.
class StreamEvent {
 public:
  virtual ~StreamEvent() = default;
  // Blocks the calling thread until the work before the event is done.
  virtual void synchronize() const = 0;
};

class DeviceStream {
 public:
  // While alive, the stream is the calling thread's current one for its device.
  class Scope {
   public:
    virtual ~Scope() = default;
  };

  virtual ~DeviceStream() = default;
  virtual torch::Device device() const = 0;
  // Null where there is nothing to switch (the CPU).
  virtual std::unique_ptr<Scope> enter() = 0;
  // An event after the work queued on this stream so far; null on the CPU (done already).
  virtual std::shared_ptr<const StreamEvent> record() = 0;
  // Work queued on this stream from now on runs after `event` (null: nothing to wait for).
  virtual void wait(const StreamEvent* event) = 0;
  // Work queued on this stream from now on runs after the work the calling thread has queued
  // on its current stream of this device (outside enter(), the default one): what a
  // constructor, a checkpoint load or an evaluation wrote there is in place when a segment's
  // work starts.
  virtual void join_current() = 0;
  // `tensor`, produced on another stream, is read by this one: its memory must not be reused
  // before this stream's work queued so far is done (the caching allocator's record_stream).
  virtual void hold(const torch::Tensor& tensor) = 0;
  // Blocks until the work queued on this stream is done.
  virtual void synchronize() = 0;
};

// The CPU's stream, or a CUDA stream from LibTorch's pool for a CUDA device. Throws UsageError
// naming the device for a device this build cannot drive (a CUDA device where LibTorch has no
// CUDA) or that is absent.
std::unique_ptr<DeviceStream> make_stream(const torch::Device& device);

// The calling thread's current stream of `device` (outside any DeviceStream::enter, the
// default one), as a DeviceStream that refers to it: an event recorded there orders what the
// caller wrote before a partition's stream reads it; a wait there orders the caller's later
// work after another stream's. Throws UsageError as make_stream does.
std::unique_ptr<DeviceStream> current_stream(const torch::Device& device);

// Whether this build's LibTorch drives CUDA devices.
bool built_with_cuda();

}  // namespace stalepipe::exec
