// The one clock for measured durations (training time, benchmarks): monotonic, in seconds.
#pragma once

#include <chrono>

namespace stalepipe {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace stalepipe
