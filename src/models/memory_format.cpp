#include "stalepipe/models/memory_format.h"

namespace stalepipe::models {

void to_memory_format(torch::nn::Module& module, torch::MemoryFormat format) {
  torch::NoGradGuard no_grad;
  // By strides (suggest_memory_format), not is_contiguous: a 1-channel weight (the first conv
  // on grey images) is contiguous in both layouts, and oneDNN, which picks a convolution's
  // layout from the strides, then ran that conv in NCHW with reorders of its activations.
  auto convert = [format](torch::Tensor& t) {
    if (t.defined() && t.dim() == 4 && t.suggest_memory_format() != format) {
      t.set_data(torch::empty_like(t.data(), format).copy_(t.data()));
    }
  };
  for (auto& p : module.parameters()) convert(p);
  for (auto& b : module.buffers()) convert(b);
}

torch::Tensor in_memory_format(const torch::Tensor& x, torch::MemoryFormat format) {
  return x.dim() == 4 ? x.contiguous(format) : x;
}

}  // namespace stalepipe::models
