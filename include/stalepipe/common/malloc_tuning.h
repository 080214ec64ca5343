// glibc's malloc, set for training, where the same large tensors are freed and allocated again
// at every step.
#pragma once

#include <string>

namespace stalepipe {

// Makes glibc keep freed memory for reuse rather than hand it back to the kernel, which must
// then fault in and zero the pages again at the next step: one arena for every thread (a
// worker thread's own arena returns its heaps as they empty), no trimming of the heap top, and
// the largest mmap threshold (32 MiB). Measured: a ResNet-56 step on a worker thread took
// ~40,000 page faults by default and ~150 with these settings (docs/performance.md).
// A setting given in the environment (MALLOC_ARENA_MAX, MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_) is left as given. Call it first, before threads start. Returns the
// settings applied, e.g. "arena_max=1 trim_threshold=2147483647 mmap_threshold=33554432"
// ("" where none: every one set in the environment, or not glibc).
std::string keep_freed_memory();

}  // namespace stalepipe
