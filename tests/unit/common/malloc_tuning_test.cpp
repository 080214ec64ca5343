// keep_freed_memory(): a worker thread that frees and allocates the same large blocks again
// (as every training step does) no longer faults their pages in again; the environment's own
// settings win. Each suite runs in its own process (cmake/GTestSuites.cmake), which the first
// test needs: it sets glibc's malloc before any thread of the test allocates.
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "stalepipe/common/malloc_tuning.h"
#include "support/sanitizers.h"

namespace stalepipe {
namespace {

long thread_minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Minor page faults of each round of allocating, touching and freeing 24 blocks of 4 MiB,
// on a new thread (so it gets an arena of its own unless told otherwise).
std::vector<long> faults_per_round(int rounds) {
  std::vector<long> faults;
  std::thread worker([&] {
    for (int r = 0; r < rounds; ++r) {
      const long before = thread_minor_faults();
      std::vector<char*> blocks;
      for (int b = 0; b < 24; ++b) {
        blocks.push_back(static_cast<char*>(std::malloc(4 << 20)));
        std::memset(blocks.back(), r + 1, 4 << 20);
      }
      for (char* p : blocks) std::free(p);
      faults.push_back(thread_minor_faults() - before);
    }
  });
  worker.join();
  return faults;
}

TEST(KeepFreedMemory, AWorkerThreadReusesFreedBlocksWithoutFaultingThemInAgain) {
  if (test::kSanitizer) GTEST_SKIP() << "the sanitizer's malloc has no mallopt settings";
  ::unsetenv("MALLOC_ARENA_MAX");
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ASSERT_EQ(keep_freed_memory(), "arena_max=1 trim_threshold=2147483647 mmap_threshold=33554432");
  const std::vector<long> faults = faults_per_round(5);
  // The first round touches 96 MiB of new pages (24,576 of 4 KiB); the others reuse them.
  // Where transparent huge pages are "always", 2 MiB pages leave too few faults to compare.
  if (faults[0] < 20000) GTEST_SKIP() << "only " << faults[0] << " faults for 96 MiB: huge pages?";
  for (size_t r = 1; r < faults.size(); ++r) EXPECT_LT(faults[r], faults[0] / 20) << "round " << r;
}

TEST(KeepFreedMemoryUnderEnvironment, SettingsGivenInTheEnvironmentAreLeftAsGiven) {
  if (test::kSanitizer) GTEST_SKIP() << "the sanitizer's malloc has no mallopt settings";
  ::setenv("MALLOC_ARENA_MAX", "4", 1);
  ::setenv("MALLOC_MMAP_THRESHOLD_", "1048576", 1);
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  EXPECT_EQ(keep_freed_memory(), "trim_threshold=2147483647");
  ::setenv("MALLOC_TRIM_THRESHOLD_", "0", 1);
  EXPECT_EQ(keep_freed_memory(), "");
}

}  // namespace
}  // namespace stalepipe
