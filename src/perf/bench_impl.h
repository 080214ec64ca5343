// Shared by bench.cpp (the measurements) and bench_report.cpp (their text and JSON).
#pragma once

namespace stalepipe::perf {

// num / den, or 0 when either is missing (not measured).
inline double ratio(double num, double den) { return num > 0 && den > 0 ? num / den : 0; }

}  // namespace stalepipe::perf
