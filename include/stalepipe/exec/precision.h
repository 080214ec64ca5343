// The arithmetic a run trains in (PipelineOptions::precision; docs/design.md, "Precision").
//
//   kFp32: IEEE single precision throughout. On CUDA this turns TF32 off for cuDNN's
//          convolutions and cuBLAS's matmuls (LibTorch leaves it on for cuDNN by default), so
//          a GPU run computes what it says. On the CPU nothing changes: bit for bit as before.
//   kTf32: CUDA partitions only: fp32 tensors, with convolutions and matmuls on TF32 tensor
//          cores (10-bit mantissa inputs, fp32 accumulation). The CPU has no TF32.
//   kBf16: each partition's forward runs under autocast to bfloat16 (convolutions, linear
//          layers and matmuls in bf16; LibTorch's autocast lists decide op by op), on CUDA and
//          on the CPU alike; weights, gradients and optimizer state stay fp32 (the master
//          copy), registers carry bf16 activations and gradients, and the loss and the
//          metric are computed in fp32 from the last partition's output. TF32 is on for what
//          stays fp32 on CUDA. A convolution's backward uses the bf16 copy of its weights that
//          its forward made, i.e. the forward's weights, not the current ones (autocast keeps
//          that copy): a stale pipeline's convolutions then see weight stashing's semantics.
#pragma once

#include <string>

#include <torch/types.h>

namespace stalepipe::exec {

enum class Precision { kFp32, kTf32, kBf16 };

Precision precision_from_name(const std::string& name, const std::string& field);
std::string to_string(Precision precision);

// Sets LibTorch's process-wide TF32 switches (cuBLAS and cuDNN) for `precision`: off for
// fp32, on for tf32 and bf16. They affect CUDA devices only.
void set_tf32(Precision precision);

// While alive, the calling thread's operations on `device` autocast to bfloat16 if
// `precision` is kBf16 (otherwise it does nothing). Restores the thread's autocast state and,
// when the outermost scope ends, drops autocast's cache of cast weights (the next forward
// casts the weights as they are then).
class AutocastScope {
 public:
  AutocastScope(Precision precision, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::BFloat16;
};

// `t` in fp32 if it is a reduced-precision floating tensor (bf16, fp16), else `t`: what the
// loss, the metric and evaluation read from a bf16 partition.
torch::Tensor to_full_precision(const torch::Tensor& t);

}  // namespace stalepipe::exec
