// The stages of a partitioned model: partition k's units become one torch::nn::Sequential on
// devices[k], with its own optimizer (and their skip tensors, models/skips.h). The units' modules are shared with the Model, not copied.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "stalepipe/exec/stage.h"
#include "stalepipe/models/model.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::exec {

// Partition k's units as a Stage takes them: a Sequential sharing the model's modules, and
// each unit's skip tensors.
struct StageUnits {
  torch::nn::Sequential module;
  std::vector<models::Skips> skips;
};
StageUnits stage_units(const models::Model& model, const partition::Plan& plan, int k);

class Pipeline {
 public:
  // devices: one per partition (plan.num_partitions()); seed, memory_format, precision: as
  // Stage's; each stage recomputes the plan's recomputed units it holds. Where a device is a
  // GPU, sets the process-wide TF32 switches for `precision` (exec/precision.h).
  Pipeline(const models::Model& model, const partition::Plan& plan,
           const std::vector<torch::Device>& devices, optim::UpdateOptions update,
           Objective objective = {}, uint64_t seed = 0,
           torch::MemoryFormat memory_format = torch::MemoryFormat::Contiguous,
           Precision precision = Precision::kFp32);

  int num_stages() const { return static_cast<int>(stages_.size()); }
  Stage& stage(int k) { return *stages_[k]; }
  // Raw pointers in partition order, as Executor::run takes them.
  std::vector<Stage*>& stages() { return stage_ptrs_; }

  // Evaluation forward through all partitions (no graph, eval mode), skip tensors handed on.
  torch::Tensor predict(const torch::Tensor& input);
  // The same, keeping what each partition took and gave (its skip tensors in its order).
  std::vector<std::pair<StageTensors, StageTensors>> trace(const torch::Tensor& input);
  // Copies of all parameters, partition by partition, in module order.
  std::vector<torch::Tensor> parameters() const;

 private:
  // predict(), and trace() where `steps` is given.
  torch::Tensor forward_stages(const torch::Tensor& input, std::vector<std::pair<StageTensors, StageTensors>>* steps);
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<Stage*> stage_ptrs_;
};

}  // namespace stalepipe::exec
