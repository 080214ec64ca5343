#include "stalepipe/exec/device_stream.h"

#include <atomic>

#include "cpu_streams_impl.h"
#include "cuda_stream_impl.h"
#include "stalepipe/common/device.h"
#include "stalepipe/common/error.h"

namespace stalepipe::exec {
namespace {

class CpuStream final : public DeviceStream {
 public:
  torch::Device device() const override { return torch::kCPU; }
  std::unique_ptr<Scope> enter() override { return nullptr; }
  std::shared_ptr<const StreamEvent> record() override { return nullptr; }
  // A GPU producer's tensor is read by the host as soon as this returns.
  void wait(const StreamEvent* event) override {
    if (event) event->synchronize();
  }
  void join_current() override {}
  void hold(const torch::Tensor&) override {}
  void synchronize() override {}
};

std::atomic<detail::CpuStreams*> cpu_streams{nullptr};

// A new stream of `device` (make_stream), or the calling thread's current one.
std::unique_ptr<DeviceStream> stream_of(const torch::Device& device, bool current) {
  if (device.is_cpu()) {
    detail::CpuStreams* streams = cpu_streams.load();
    if (!streams) return std::make_unique<CpuStream>();
    return current ? streams->current() : streams->make();
  }
  SP_CHECK_ARG(!device.is_cuda() || built_with_cuda(), "device ", device.str(),
               ": this build's LibTorch has no CUDA (build against a CUDA LibTorch, scripts/gpu-check.sh)");
  check_device(device, "device");
  return current ? detail::current_cuda_stream(device) : detail::make_cuda_stream(device);
}

}  // namespace

namespace detail {

CpuStreams* set_cpu_streams(CpuStreams* streams) { return cpu_streams.exchange(streams); }

}  // namespace detail

bool built_with_cuda() { return detail::kCudaStreams; }

std::unique_ptr<DeviceStream> make_stream(const torch::Device& device) { return stream_of(device, false); }

std::unique_ptr<DeviceStream> current_stream(const torch::Device& device) { return stream_of(device, true); }

}  // namespace stalepipe::exec
