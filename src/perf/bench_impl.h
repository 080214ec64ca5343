// Shared by bench.cpp (the measurements), bench_report.cpp (their text and JSON) and
// steady.cpp (one configuration's steady state).
#pragma once

namespace stalepipe::perf {

// Every configuration's constant learning rate: speed does not depend on it, but a diverging
// run (NaN) could, so it is modest.
constexpr double kBenchLr = 0.01;

// num / den, or 0 when either is missing (not measured).
inline double ratio(double num, double den) { return num > 0 && den > 0 ? num / den : 0; }

}  // namespace stalepipe::perf
