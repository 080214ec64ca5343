// Errors thrown by stalepipe.
//
// Two kinds, so that a caller (the CLI) can tell the user's mistake from a failure at run time:
//   UsageError   - a bad option, flag, model name, PPV, device list...  CLI exit status 2.
//   RuntimeError - a failure while running: I/O, a corrupt data file, a worker that threw,
//                  a missing peer process, a diverged run (DivergedError).  CLI exit status 1.
// Messages are one line: what was expected, what was found, and where (file, record,
// partition, mini-batch), ending with a hint where one helps. Library code never calls exit().
#pragma once

#include <stdexcept>
#include <string>

#include <c10/util/StringUtil.h>

namespace stalepipe {

class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The training loss or the weights became NaN or infinite: the run diverged (typically too
// much staleness for its learning rate). CLI exit status 1; the last checkpoint, written
// before the divergence, is intact.
class DivergedError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

}  // namespace stalepipe

// SP_CHECK_ARG(cond, parts...) throws UsageError(c10::str(parts...)) when cond is false.
#define SP_CHECK_ARG(cond, ...)                                    \
  do {                                                             \
    if (!(cond)) {                                                 \
      throw ::stalepipe::UsageError(::c10::str(__VA_ARGS__));      \
    }                                                              \
  } while (false)

// SP_CHECK(cond, parts...) throws RuntimeError(c10::str(parts...)) when cond is false.
#define SP_CHECK(cond, ...)                                        \
  do {                                                             \
    if (!(cond)) {                                                 \
      throw ::stalepipe::RuntimeError(::c10::str(__VA_ARGS__));    \
    }                                                              \
  } while (false)
