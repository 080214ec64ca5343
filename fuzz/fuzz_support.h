// What every harness under fuzz/ shares. A harness defines LLVMFuzzerTestOneInput and hands
// the bytes to one of stalepipe's readers of outside bytes; a stalepipe error (UsageError,
// RuntimeError) is the expected end of a bad input, anything else escapes and is a finding:
// libFuzzer reports it as a crash, the driver of the ordinary build (driver_main.cpp) as a
// failed test.
//
// Two builds of the same harnesses (fuzz/CMakeLists.txt):
//   ordinary (gcc):  each harness + driver_main.cpp, a ctest test (label unit) that runs the
//                    committed corpus fuzz/corpus/<harness>/ and deterministic mutations of it;
//   STALEPIPE_FUZZ:  clang -fsanitize=fuzzer,address,undefined; scripts/fuzz.sh SECONDS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "stalepipe/common/error.h"

namespace stalepipe::fuzz {

// A folder of this process for the files a reader must find on disk (removed at exit).
const std::string& scratch_dir();

// Writes `bytes` to scratch_dir()/name and returns the path.
std::string write_scratch(const std::string& name, const std::string& bytes);

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs `read`; stalepipe's errors are the expected outcome of bad bytes and end here.
template <typename F>
void expect_only_stalepipe_errors(F&& read) {
  try {
    read();
  } catch (const UsageError&) {
  } catch (const RuntimeError&) {
  }
}

}  // namespace stalepipe::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
