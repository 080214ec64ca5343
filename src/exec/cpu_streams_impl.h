// Where the CPU's streams come from: the no-op ones of device_stream.cpp, or a test's stand-in
// that gives each CPU stream an identity and checks that work crossing from one to another was
// ordered by an event (tests/support/stream_checker.h), so that a missing wait fails on the
// CPU as it would race on a GPU. Private to src/exec and the tests.
#pragma once

#include <memory>

#include "stalepipe/exec/device_stream.h"

namespace stalepipe::exec::detail {

class CpuStreams {
 public:
  virtual ~CpuStreams() = default;
  virtual std::unique_ptr<DeviceStream> make() = 0;
  // The calling thread's current CPU stream.
  virtual std::unique_ptr<DeviceStream> current() = 0;
};

// Makes every CPU stream from now on come from `streams` (null: the no-op ones); returns the
// previous source. The caller keeps `streams` alive while it is installed and while streams it
// made are in use.
CpuStreams* set_cpu_streams(CpuStreams* streams);

}  // namespace stalepipe::exec::detail
