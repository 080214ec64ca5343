#include "stalepipe/common/malloc_tuning.h"

#include <climits>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace stalepipe {

std::string keep_freed_memory() {
  std::string applied;
#if defined(__GLIBC__)
  const struct {
    const char* env;  // glibc's own variable for the same setting
    int param;
    int value;
    const char* name;
  } settings[] = {
      {"MALLOC_ARENA_MAX", M_ARENA_MAX, 1, "arena_max"},
      {"MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, INT_MAX, "trim_threshold"},
      // glibc's ceiling on 64-bit (HEAP_MAX_SIZE / 2); mallopt refuses more.
      {"MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, 32 << 20, "mmap_threshold"},
  };
  for (const auto& s : settings) {
    if (std::getenv(s.env) != nullptr) continue;
    if (mallopt(s.param, s.value) != 1) continue;
    applied += (applied.empty() ? "" : " ") + std::string(s.name) + "=" + std::to_string(s.value);
  }
#endif
  return applied;
}

}  // namespace stalepipe
