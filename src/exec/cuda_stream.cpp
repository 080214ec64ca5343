// exec::DeviceStream on CUDA: a pool stream per partition, events between them, and the caching
// allocator told which stream reads a tensor made on another.
#include "cuda_stream_impl.h"

#include "stalepipe/common/error.h"

#ifdef STALEPIPE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace stalepipe::exec::detail {
namespace {

class CudaEvent final : public StreamEvent {
 public:
  explicit CudaEvent(const c10::cuda::CUDAStream& stream) { event_.record(stream); }
  void synchronize() const override { event_.synchronize(); }
  void block(const c10::cuda::CUDAStream& stream) const { event_.block(stream); }

 private:
  // Timing off: the cheapest event to record and wait for. block() is not const in LibTorch.
  mutable at::cuda::CUDAEvent event_{cudaEventDisableTiming};
};

class CudaScope final : public DeviceStream::Scope {
 public:
  explicit CudaScope(const c10::cuda::CUDAStream& stream) : guard_(stream) {}

 private:
  c10::cuda::CUDAStreamGuard guard_;
};

class CudaStream final : public DeviceStream {
 public:
  CudaStream(const torch::Device& device, const c10::cuda::CUDAStream& stream) : device_(device), stream_(stream) {}
  torch::Device device() const override { return device_; }
  std::unique_ptr<Scope> enter() override { return std::make_unique<CudaScope>(stream_); }
  std::shared_ptr<const StreamEvent> record() override { return std::make_shared<CudaEvent>(stream_); }
  void wait(const StreamEvent* event) override {
    if (!event) return;
    if (const auto* cuda = dynamic_cast<const CudaEvent*>(event)) {
      cuda->block(stream_);
    } else {
      event->synchronize();
    }
  }
  void join_current() override {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    if (current != stream_) CudaEvent(current).block(stream_);
  }
  void hold(const torch::Tensor& tensor) override {
    if (tensor.defined() && tensor.is_cuda()) {
      c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), stream_);
    }
  }
  void synchronize() override { stream_.synchronize(); }

 private:
  torch::Device device_;
  c10::cuda::CUDAStream stream_;
};

}  // namespace

std::unique_ptr<DeviceStream> make_cuda_stream(const torch::Device& device) {
  return std::make_unique<CudaStream>(device, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
}

std::unique_ptr<DeviceStream> current_cuda_stream(const torch::Device& device) {
  return std::make_unique<CudaStream>(device, c10::cuda::getCurrentCUDAStream(device.index()));
}

}  // namespace stalepipe::exec::detail

#else

namespace stalepipe::exec::detail {

std::unique_ptr<DeviceStream> make_cuda_stream(const torch::Device& device) {
  throw UsageError(c10::str("device ", device.str(), ": this build's LibTorch has no CUDA"));
}

std::unique_ptr<DeviceStream> current_cuda_stream(const torch::Device& device) { return make_cuda_stream(device); }

}  // namespace stalepipe::exec::detail

#endif
