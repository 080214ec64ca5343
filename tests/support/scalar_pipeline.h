// Three scalar partitions small enough to follow by hand (tests of the schedule's weight rule):
// their initial weights, the learning rate, and each step's input and target.
#pragma once

#include <cstdint>

namespace stalepipe::test::scalar {

constexpr double kLr = 0.1;
constexpr double kInitial[3] = {0.9, -1.1, 0.7};

inline double input_of(int64_t t) { return 1.0 + 0.25 * static_cast<double>(t % 3); }
inline double target_of(int64_t t) { return 0.5 - 0.3 * static_cast<double>(t % 2); }

}  // namespace stalepipe::test::scalar
