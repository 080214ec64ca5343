// The tests' crash trace (tests/support/test_device.h): a GPU test that dies of a signal
// leaves its stack on stderr.
#include <signal.h>

#include <gtest/gtest.h>

#include "support/test_device.h"

namespace stalepipe::test {
namespace {

TEST(CrashTrace, ASegmentationFaultPrintsTheStackAndStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_crash_trace();
        ::raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV), "fatal signal; the stack");
}

}  // namespace
}  // namespace stalepipe::test
