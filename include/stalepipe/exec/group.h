// Where a pipeline's partitions run: all in this process (make_local_group) or one per rank of
// a process group (make_rank_group, exec/processes.h). The training loop asks the group its
// few questions instead of branching on ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace stalepipe::exec {

class Pipeline;

class Group {
 public:
  virtual ~Group() = default;
  // Whether this process runs partition k (0-based) of its replica: its stage is trained here.
  virtual bool owns(int partition) const = 0;
  // This process's replica (PipelineOptions::replicas; 0-based). Replica 0's stages are the
  // ones saved, loaded and evaluated; the others follow them.
  virtual int replica() const = 0;
  // The one process that writes the run's files and logs.
  virtual bool leader() const = 0;
  // Gives every process the `values` of replica 0's last partition (where losses and metrics
  // arise).
  virtual void share_from_last(std::vector<double>& values) = 0;
  // Replica 0's state (weights, buffers, optimizer) into the other replicas' stages, after a
  // load. pipelines: this process's replicas, replica 0 first (with processes: its own one).
  virtual void copy_first_replica(const std::vector<Pipeline*>& pipelines) = 0;
  // Returns once every process has called it.
  virtual void barrier() = 0;
  // `values` holds one equal slice per partition (values.size() a multiple of the number of
  // partitions); each process of replica 0 fills the slices of the partitions it owns, and on
  // return every process holds every slice. A collective call, so it also waits for every process.
  virtual void gather_partitions(std::vector<int64_t>& values) = 0;
  // Every process's `value`, in rank order (one value where all runs in this process). A
  // collective call.
  virtual std::vector<int64_t> gather_processes(int64_t value) = 0;
  // Evaluation forward of batch `index` of a pass (eval mode, no graph): the model's output and
  // the target where the last partition runs, undefined tensors elsewhere. x and target matter
  // only where partition 1 runs.
  virtual std::pair<torch::Tensor, torch::Tensor> predict(Pipeline& pipeline, const torch::Tensor& x,
                                                          const torch::Tensor& target,
                                                          int64_t index) = 0;
};

std::unique_ptr<Group> make_local_group();

}  // namespace stalepipe::exec
