// A stage's backward runs on the thread that asks for it (src/common/backward_impl.h), on a GPU
// too, where LibTorch would otherwise run it on its one engine thread of that device, shared by
// every partition. On the CPU every backward already runs on its caller; the check means most
// with STALEPIPE_TEST_DEVICE=cuda:N (scripts/gpu-check.sh graphs).
#include <array>
#include <thread>

#include <gtest/gtest.h>

#include "exec/step_graph_impl.h"
#include "support/test_device.h"

namespace stalepipe::test {
namespace {

// The thread that ran the gradient of a weight, in a backward `backward_from` runs.
std::thread::id thread_of_a_backward(const torch::Device& device) {
  const torch::Tensor w = torch::randn({64, 64}, torch::TensorOptions(device).requires_grad(true));
  const torch::Tensor x = torch::randn({32, 64}, torch::TensorOptions(device));
  std::thread::id ran_on;
  w.register_hook([&ran_on](const torch::Tensor&) { ran_on = std::this_thread::get_id(); });
  const torch::Tensor h = torch::relu(torch::mm(x, w));
  exec::detail::backward_from({h}, {torch::ones_like(h)});
  return ran_on;
}

TEST(Backward, RunsOnTheThreadOfEachPartitionThatAsks) {
  const torch::Device device = test_device();
  EXPECT_EQ(thread_of_a_backward(device), std::this_thread::get_id());
  // Two partitions' threads at once, as the threads executor runs them on one device.
  std::array<bool, 2> own{};
  std::array<std::thread, 2> partitions;
  for (size_t i = 0; i < partitions.size(); ++i) {
    partitions[i] = std::thread([&own, i, device] {
      for (int round = 0; round < 20; ++round) {
        if (thread_of_a_backward(device) != std::this_thread::get_id()) return;
      }
      own[i] = true;
    });
  }
  for (std::thread& t : partitions) t.join();
  EXPECT_TRUE(own[0]);
  EXPECT_TRUE(own[1]);
}

}  // namespace
}  // namespace stalepipe::test
