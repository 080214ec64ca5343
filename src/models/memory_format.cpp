#include "stalepipe/models/memory_format.h"

namespace stalepipe::models {

void to_memory_format(torch::nn::Module& module, torch::MemoryFormat format) {
  torch::NoGradGuard no_grad;
  auto convert = [format](torch::Tensor& t) {
    if (t.defined() && t.dim() == 4 && !t.is_contiguous(format)) t.set_data(t.data().contiguous(format));
  };
  for (auto& p : module.parameters()) convert(p);
  for (auto& b : module.buffers()) convert(b);
}

torch::Tensor in_memory_format(const torch::Tensor& x, torch::MemoryFormat format) {
  return x.dim() == 4 ? x.contiguous(format) : x;
}

}  // namespace stalepipe::models
