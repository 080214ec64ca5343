// The one clock for measured durations (training time, benchmarks): monotonic, in seconds.
#pragma once

#include <chrono>

namespace stalepipe {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Now on the clock's own scale, in seconds: timestamps that different threads record and that
// are compared later (the workers' op times, a trace's origin).
inline double steady_seconds() {
  return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count();
}

}  // namespace stalepipe
