// The device a test that can run on a GPU uses: the one STALEPIPE_TEST_DEVICE names
// (scripts/gpu-check.sh graphs sets cuda:0), else the CPU.
#pragma once

#include <cstdlib>

#include <ATen/Context.h>
#include <torch/types.h>

namespace stalepipe::test {

// Prints the stack on stderr when the process dies of SIGSEGV, SIGBUS or SIGABRT: a test on a
// GPU machine that crashes at times, where no debugger is, then leaves where it crashed. Not
// on the CPU, where the sanitizers' own handlers report.
void install_crash_trace();

inline torch::Device test_device() {
  const char* name = std::getenv("STALEPIPE_TEST_DEVICE");
  if (!(name && *name)) return torch::Device(torch::kCPU);
  install_crash_trace();
  return torch::Device(name);
}

// cuDNN's deterministic algorithms, benchmark mode off, while it lives (and the flags as they
// were after): runs compared on a GPU then differ only by what the test is about, not by the
// algorithms cuDNN picks per run (its default backward convolutions add in no fixed order).
class DeterministicCuDNN {
 public:
  DeterministicCuDNN()
      : deterministic_(at::globalContext().deterministicCuDNN()), benchmark_(at::globalContext().benchmarkCuDNN()) {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  ~DeterministicCuDNN() {
    at::globalContext().setDeterministicCuDNN(deterministic_);
    at::globalContext().setBenchmarkCuDNN(benchmark_);
  }
  DeterministicCuDNN(const DeterministicCuDNN&) = delete;
  DeterministicCuDNN& operator=(const DeterministicCuDNN&) = delete;

 private:
  bool deterministic_, benchmark_;
};

}  // namespace stalepipe::test
