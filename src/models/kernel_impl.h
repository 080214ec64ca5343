// What the hand-written loops of models/ share.
#pragma once

#include <ATen/Parallel.h>
#include <torch/types.h>

// A loop marked SP_KERNEL gets an AVX2 clone that is picked at load time where the CPU has it
// (the build itself targets plain x86-64): the loops are memory-bound, and the wider vectors
// mostly save instructions. Not under ThreadSanitizer: the clone's resolver runs when the
// library is loaded, before TSan's runtime is set up, and its instrumentation crashes there.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SP_THREAD_SANITIZER 1
#endif
#elif defined(__SANITIZE_THREAD__)
#define SP_THREAD_SANITIZER 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SP_THREAD_SANITIZER)
#define SP_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define SP_KERNEL
#endif

namespace stalepipe::models {

// Where a hand-written loop replaces LibTorch's kernels: on one intra-op thread (a pipeline's
// workers, or non-pipelined training with --threads 1), for a float CPU tensor. The loops run
// on the calling thread: stalepipe is not built with OpenMP (where LibTorch brings its own
// copy of the runtime, as the PyTorch wheel does, a second runtime would not obey
// at::set_num_threads), and with more threads LibTorch's kernels share the work.
inline bool runs_by_hand(const torch::Tensor& x) {
  return at::get_num_threads() == 1 && x.device().is_cpu() && x.scalar_type() == torch::kFloat;
}

}  // namespace stalepipe::models
