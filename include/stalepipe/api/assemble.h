// The one way to turn (model, options) into a pipeline: profile (only for Balance::kTime, or
// when asked) -> balance -> plan -> stages. PipelineTrainer, train/, bench, memory, simulate
// and the tests all call it, so they choose the same PPV for the same model, K and balance.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "stalepipe/api/options.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/model.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe {

struct Assembly {
  partition::Plan plan;
  std::vector<torch::Device> devices;     // one per partition
  std::vector<int> threads_per_worker;    // one per partition
  std::optional<partition::Profile> profile;  // measured for kTime or when asked
  std::unique_ptr<exec::Pipeline> pipeline;   // null from plan_pipeline()
};

// How the partitioner profiles a model for K partitions: profile_batch samples (0: a
// replica's slice of the training batch, the whole batch with one replica), each unit on
// the intra-op thread count a worker of the K-partition pipeline will have, 1 warm-up and 3
// measured steps.
partition::ProfileOptions profile_settings(const Options& options, int partitions);
// The layout PipelineOptions::layout asks for (resolved_layout).
torch::MemoryFormat memory_format(const Options& options);

// profile_model with those settings, then the model's parameters, buffers and the global RNG
// put back, so that building a pipeline never changes what training computes.
partition::Profile profile_preserving_state(models::Model& model, const Options& options,
                                            int partitions);

// Resolves the cut: options.ppv, or the balanced PPV for options.partitions. Also profiles
// when want_profile (bench and simulate read the profile). `given`: a profile to use instead
// of measuring one (simulate --profile FILE). Throws UsageError naming the field for an
// impossible cut, device list or thread count.
Assembly plan_pipeline(models::Model& model, const Options& options, bool want_profile = false,
                       const partition::Profile* given = nullptr);

// plan_pipeline, then the stages: the model's units shared (not copied) and moved to their
// devices, one SGD per partition from options.optimizer (anneal steps: delay_lr_anneal_epochs
// x steps_per_epoch), the loss on the last. replica: which copy of the pipeline the stages are
// (PipelineOptions::replicas); it chooses their random numbers (replica_seed).
Assembly assemble(models::Model& model, const Options& options, int64_t steps_per_epoch = 0,
                  bool want_profile = false, int replica = 0);

// The stages of another copy of the network cut as `a` is: what assemble() builds, for
// replica `replica`.
std::unique_ptr<exec::Pipeline> build_stages(models::Model& model, const Assembly& a, const Options& options,
                                             int64_t steps_per_epoch, int replica);

// The seed the stages of replica r draw their random numbers (dropout) from: the run's seed
// for replica 0, unrelated seeds for the others, so that the replicas' masks differ.
uint64_t replica_seed(uint64_t seed, int replica);

// The per-partition optimizer settings the option tree implies.
optim::UpdateOptions update_options(const OptimizerOptions& options, int64_t steps_per_epoch);

}  // namespace stalepipe
