// The device a test that can run on a GPU uses: the one STALEPIPE_TEST_DEVICE names
// (scripts/gpu-check.sh graphs sets cuda:0), else the CPU.
#pragma once

#include <cstdlib>

#include <torch/types.h>

namespace stalepipe::test {

inline torch::Device test_device() {
  const char* name = std::getenv("STALEPIPE_TEST_DEVICE");
  return name && *name ? torch::Device(name) : torch::Device(torch::kCPU);
}

}  // namespace stalepipe::test
