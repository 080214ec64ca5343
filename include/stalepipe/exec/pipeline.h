// The stages of a partitioned model: partition k's units become one torch::nn::Sequential on
// devices[k], with its own optimizer. The units' modules are shared with the Model, not copied.
#pragma once

#include <memory>
#include <vector>

#include "stalepipe/exec/stage.h"
#include "stalepipe/models/model.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::exec {

class Pipeline {
 public:
  // devices: one per partition (plan.num_partitions()); seed, memory_format: as Stage's;
  // each stage recomputes the plan's recomputed units it holds.
  Pipeline(const models::Model& model, const partition::Plan& plan,
           const std::vector<torch::Device>& devices, optim::SgdOptions sgd,
           Objective objective = {}, uint64_t seed = 0,
           torch::MemoryFormat memory_format = torch::MemoryFormat::Contiguous);

  int num_stages() const { return static_cast<int>(stages_.size()); }
  Stage& stage(int k) { return *stages_[k]; }
  // Raw pointers in partition order, as Executor::run takes them.
  std::vector<Stage*>& stages() { return stage_ptrs_; }

  // Evaluation forward through all partitions (no graph, eval mode).
  torch::Tensor predict(const torch::Tensor& input);
  // Copies of all parameters, partition by partition, in module order.
  std::vector<torch::Tensor> parameters() const;

 private:
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<Stage*> stage_ptrs_;
};

}  // namespace stalepipe::exec
