#include "stalepipe/exec/pipeline.h"

#include <algorithm>

#include "stalepipe/common/error.h"

namespace stalepipe::exec {

StageUnits stage_units(const models::Model& model, const partition::Plan& plan, int k) {
  StageUnits out;
  const auto [begin, end] = plan.unit_ranges.at(k);
  for (size_t u = begin; u < end; ++u) {
    out.module->push_back(model.units[u].name, model.units[u].module);
    out.skips.push_back(model.units[u].skips);
  }
  return out;
}

Pipeline::Pipeline(const models::Model& model, const partition::Plan& plan,
                   const std::vector<torch::Device>& devices, optim::UpdateOptions update, Objective objective,
                   uint64_t seed, torch::MemoryFormat memory_format, Precision precision) {
  const int K = plan.num_partitions();
  SP_CHECK_ARG(static_cast<int>(devices.size()) == K, "pipeline of ", K, " partitions needs ", K,
               " devices, got ", devices.size());
  if (std::any_of(devices.begin(), devices.end(), [](const torch::Device& d) { return d.is_cuda(); })) {
    set_tf32(precision);
  }
  for (int k = 0; k < K; ++k) {
    StageUnits units = stage_units(model, plan, k);
    stages_.push_back(std::make_unique<Stage>(units.module, StageOptions(k, K)
                                                                .device(devices[k])
                                                                .update(update)
                                                                .objective(objective)
                                                                .seed(seed)
                                                                .first_unit(plan.unit_ranges.at(k).first)
                                                                .memory_format(memory_format)
                                                                .recompute_units(plan.recomputed_units(k))
                                                                .skips(std::move(units.skips))
                                                                .precision(precision)));
    stage_ptrs_.push_back(stages_.back().get());
  }
}

torch::Tensor Pipeline::predict(const torch::Tensor& input) { return forward_stages(input, nullptr); }

std::vector<std::pair<StageTensors, StageTensors>> Pipeline::trace(const torch::Tensor& input) {
  std::vector<std::pair<StageTensors, StageTensors>> steps;
  forward_stages(input, &steps);
  return steps;
}

torch::Tensor Pipeline::forward_stages(const torch::Tensor& input,
                                       std::vector<std::pair<StageTensors, StageTensors>>* steps) {
  torch::Tensor x = input;
  models::SkipTable skips;  // sent by earlier partitions, not yet taken
  for (auto& stage : stages_) {
    StageTensors in{x, {}};
    for (const std::string& name : stage->skip_inputs()) {
      in.skips.push_back(skips.at(name));
      skips.erase(name);
    }
    StageTensors out = stage->predict(in);
    x = out.main;
    for (size_t i = 0; i < out.skips.size(); ++i) skips[stage->skip_outputs()[i]] = out.skips[i];
    if (steps) steps->emplace_back(std::move(in), std::move(out));
  }
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
