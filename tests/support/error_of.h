// The message of the error a call throws, for tests of error messages.
#pragma once

#include <string>

namespace stalepipe {
namespace test {

// fn()'s exception of type Error, as its what(); a marker string where fn throws nothing (an
// error of another type propagates, failing the test).
template <typename Error, typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error thrown)";
}

}  // namespace test
}  // namespace stalepipe
