// The message format of pipeline registers (src/exec/links_impl.h) and the device streams they
// are ordered by (exec/device_stream.h), on the CPU.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include "exec/links_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/device_stream.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::exec {
namespace {

using detail::Lane;
using detail::Message;
using detail::Wiring;

TEST(Wiring, AChainHasAnActivationAndAGradientRouteBetweenNeighbours) {
  const Wiring w = Wiring::chain(3);
  ASSERT_EQ(w.routes().size(), 4u);
  for (size_t i = 0; i < w.routes().size(); ++i) EXPECT_EQ(w.routes()[i].id, static_cast<int>(i));
  const auto& down = w.find(1, 2, Lane::kActivation);
  EXPECT_EQ(down.names, (std::vector<std::string>{"activation", "target"}));
  const auto& up = w.find(2, 1, Lane::kGradient);
  EXPECT_EQ(up.names, (std::vector<std::string>{"gradient"}));
  EXPECT_TRUE(Wiring::chain(1).routes().empty());
}

TEST(Wiring, RefusesARouteItDoesNotHaveAndAMessageWithOtherTensors) {
  const Wiring w = Wiring::chain(3);
  try {
    w.find(0, 2, Lane::kActivation);
    FAIL() << "found a route that skips a worker";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no activation route from worker 1 to worker 3"), std::string::npos)
        << e.what();
  }
  const auto& down = w.find(0, 1, Lane::kActivation);
  EXPECT_NO_THROW(Wiring::check_names(down, {"activation", "target"}));
  try {
    Wiring::check_names(down, {"target", "activation"});
    FAIL() << "accepted the tensors in another order";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("carries [target, activation], its route [activation, target]"),
              std::string::npos)
        << e.what();
  }
}

// The U-Net cut after layers 1 and 3: enc1 goes from partition 1 straight to 3 on a route of
// its own, enc2 from 2 to 3 along with the activation; each gradient goes back the same way.
TEST(Wiring, SkipTensorsGoStraightFromProducerToConsumer) {
  torch::manual_seed(0);
  const models::Model model = models::make_model("unet", {1, 32, 32, 4});
  const partition::Plan plan = partition::make_plan(model, {1, 3});
  ASSERT_EQ(plan.skips.size(), 2u);
  EXPECT_EQ(partition::format_skip_routes(plan), "enc1: partition 1 -> 3, enc2: partition 2 -> 3");
  Pipeline pipeline(model, plan, std::vector<torch::Device>(3, torch::kCPU), optim::UpdateOptions());
  const Wiring w = Wiring::pipeline(pipeline.stages());
  ASSERT_EQ(w.routes().size(), 6u);
  EXPECT_EQ(w.find(0, 1, Lane::kActivation).names, (std::vector<std::string>{"activation", "target"}));
  EXPECT_EQ(w.find(1, 2, Lane::kActivation).names, (std::vector<std::string>{"activation", "target", "enc2"}));
  EXPECT_EQ(w.find(2, 1, Lane::kGradient).names, (std::vector<std::string>{"gradient", "enc2"}));
  EXPECT_EQ(w.find(0, 2, Lane::kActivation).names, (std::vector<std::string>{"enc1"}));
  EXPECT_EQ(w.find(2, 0, Lane::kGradient).names, (std::vector<std::string>{"enc1"}));
  EXPECT_EQ(pipeline.stage(0).skip_outputs(), (std::vector<std::string>{"enc1"}));
  EXPECT_EQ(pipeline.stage(2).skip_inputs(), (std::vector<std::string>{"enc2", "enc1"}));
}

TEST(Message, FindsItsTensorsByName) {
  Message m;
  m.step = 7;
  m.put("activation", torch::ones({2}));
  m.put("target", torch::zeros({2}, torch::kLong));
  EXPECT_EQ(m.names(), (std::vector<std::string>{"activation", "target"}));
  EXPECT_EQ(m.at("target").scalar_type(), torch::kLong);
  try {
    m.at("skip");
    FAIL() << "found a tensor the message does not have";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("mini-batch 7: no tensor 'skip' among [activation, target]"),
              std::string::npos)
        << e.what();
  }
}

// An event of another device's stream, as a CPU partition sees a GPU producer's.
struct CountingEvent final : StreamEvent {
  mutable int synchronized = 0;
  void synchronize() const override { ++synchronized; }
};

TEST(DeviceStream, TheCpuStreamIsInProgramOrderAndWaitsForOtherDevicesOnTheHost) {
  auto stream = make_stream(torch::kCPU);
  EXPECT_TRUE(stream->device().is_cpu());
  EXPECT_EQ(stream->enter(), nullptr);
  EXPECT_EQ(stream->record(), nullptr);  // nothing to wait for
  stream->wait(nullptr);
  stream->join_current();
  CountingEvent gpu_event;
  stream->wait(&gpu_event);
  EXPECT_EQ(gpu_event.synchronized, 1);  // the host waits before a CPU partition reads
  stream->hold(torch::ones({3}));
  stream->synchronize();
}

TEST(DeviceStream, ACudaDeviceNeedsACudaBuildAndThePresentDevice) {
  if (built_with_cuda() && torch::cuda::is_available()) GTEST_SKIP() << "this machine drives CUDA devices";
  try {
    make_stream(torch::Device("cuda:0"));
    FAIL() << "made a CUDA stream without CUDA";
  } catch (const UsageError& e) {
    // A CPU LibTorch cannot drive it; a CUDA one finds no such device.
    const std::string expected = built_with_cuda() ? "device: cuda:0 is not present" : "device cuda:0: this build's LibTorch has no CUDA";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stalepipe::exec
