// The CUDA implementation of exec::DeviceStream, compiled where LibTorch has CUDA
// (STALEPIPE_CUDA, set by CMake). Private to src/exec.
#pragma once

#include <memory>

#include "stalepipe/exec/device_stream.h"

namespace stalepipe::exec::detail {

#ifdef STALEPIPE_CUDA
inline constexpr bool kCudaStreams = true;
#else
inline constexpr bool kCudaStreams = false;
#endif

// A stream from LibTorch's pool on `device` (a present CUDA device). Only where kCudaStreams.
std::unique_ptr<DeviceStream> make_cuda_stream(const torch::Device& device);
// The calling thread's current stream of `device`. Only where kCudaStreams.
std::unique_ptr<DeviceStream> current_cuda_stream(const torch::Device& device);

}  // namespace stalepipe::exec::detail
