#include "stalepipe/exec/pipeline.h"

#include "stalepipe/common/error.h"

namespace stalepipe::exec {

Pipeline::Pipeline(const models::Model& model, const partition::Plan& plan,
                   const std::vector<torch::Device>& devices, optim::SgdOptions sgd, Objective objective,
                   uint64_t seed, torch::MemoryFormat memory_format) {
  const int K = plan.num_partitions();
  SP_CHECK_ARG(static_cast<int>(devices.size()) == K, "pipeline of ", K, " partitions needs ", K,
               " devices, got ", devices.size());
  for (int k = 0; k < K; ++k) {
    torch::nn::Sequential seq;
    const auto [begin, end] = plan.unit_ranges[k];
    for (size_t u = begin; u < end; ++u) seq->push_back(model.units[u].name, model.units[u].module);
    stages_.push_back(std::make_unique<Stage>(k, K, seq, devices[k], sgd, objective, seed, memory_format,
                                              plan.recomputed_units(k)));
    stage_ptrs_.push_back(stages_.back().get());
  }
}

torch::Tensor Pipeline::predict(const torch::Tensor& input) {
  torch::Tensor x = input;
  for (auto& stage : stages_) x = stage->predict(x);
  return x;
}

std::vector<torch::Tensor> Pipeline::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& stage : stages_) {
    for (const auto& p : stage->module()->parameters()) out.push_back(p.detach().clone());
  }
  return out;
}

}  // namespace stalepipe::exec
