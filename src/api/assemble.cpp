#include "stalepipe/api/assemble.h"

#include <algorithm>
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include "stalepipe/common/error.h"
#include "stalepipe/common/slices.h"
#include "stalepipe/models/memory_format.h"
#include "stalepipe/partition/balance.h"

namespace stalepipe {

torch::MemoryFormat memory_format(const Options& options) {
  return resolved_layout(options) == Layout::kChannelsLast ? torch::MemoryFormat::ChannelsLast
                                                           : torch::MemoryFormat::Contiguous;
}

partition::ProfileOptions profile_settings(const Options& options, int partitions) {
  partition::ProfileOptions p;
  const int64_t batch = options.pipeline().profile_batch();
  // A replica's slice of the mini-batch: what each worker computes on.
  const auto slice = slice_range(options.data().batch_size(), options.pipeline().replicas(), 0);
  p.batch_size = batch > 0 ? batch : slice.second - slice.first;
  p.threads = threads_per_worker(options.pipeline(), partitions);
  p.warmup = 1;
  p.repeats = 3;
  p.memory_format = memory_format(options);
  return p;
}

partition::Profile profile_preserving_state(models::Model& model, const Options& options,
                                            int partitions) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved;
  for (const auto& unit : model.units) {
    for (const auto& t : unit.module.ptr()->parameters()) saved.emplace_back(t, t.detach().clone());
    for (const auto& t : unit.module.ptr()->buffers()) saved.emplace_back(t, t.detach().clone());
  }
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto rng = generator.get_state();
  // With gradients: the profile times whole training steps, backward included.
  const partition::ProfileOptions settings = profile_settings(options, partitions);
  exec::AutocastScope autocast(options.pipeline().precision(), settings.device);  // bf16 changes the costs
  auto profile = partition::profile_model(model, settings);
  generator.set_state(rng);
  torch::NoGradGuard no_grad;  // the restore must not enter any graph
  for (auto& [live, copy] : saved) live.copy_(copy);
  return profile;
}

Assembly plan_pipeline(models::Model& model, const Options& options, bool want_profile,
                       const partition::Profile* given) {
  const PipelineOptions& o = options.pipeline();
  SP_CHECK_ARG(!model.units.empty(), "model ", model.name, " has no units");
  // Before the profile, so that it times the layout the pipeline will run.
  for (auto& unit : model.units) models::to_memory_format(*unit.module.ptr(), memory_format(options));
  Assembly a;
  const int K = o.partitions() > 0 ? o.partitions() : static_cast<int>(o.ppv().size()) + 1;
  std::vector<int> ppv = o.ppv();
  const bool balanced = o.ppv().empty() && o.partitions() > 1;  // one partition: nothing to cut
  // An impossible K fails before the profile does any work.
  if (balanced) partition::balance(model, std::vector<double>(model.units.size(), 1.0), K);
  const size_t recomputed = partition::units_through_layer(model, o.recompute(), field_name(Field::recompute));
  if (given) {
    a.profile = *given;
  } else if (want_profile || (balanced && o.balance() == Balance::kTime)) {
    a.profile = profile_preserving_state(model, options, K);
  }
  if (balanced) {
    const auto costs =
        partition::unit_costs(model, o.balance(), a.profile ? &*a.profile : nullptr, recomputed);
    ppv = partition::balance(model, costs, K);
  }
  a.plan = partition::make_plan(model, ppv, o.recompute(), field_name(Field::ppv), field_name(Field::recompute));
  const int partitions = a.plan.num_partitions();
  a.devices = o.devices();
  if (a.devices.empty()) a.devices.assign(partitions, torch::kCPU);
  SP_CHECK_ARG(static_cast<int>(a.devices.size()) == partitions, field_name(Field::devices), " names ",
               a.devices.size(), " device(s) but the pipeline has ", partitions, " partitions");
  for (int k = 0; k < partitions; ++k) {  // what only CUDA partitions have
    if (a.devices[k].is_cuda()) continue;
    SP_CHECK_ARG(o.precision() != exec::Precision::kTf32, field_name(Field::precision), " tf32: partition ", k + 1,
                 " runs on ", a.devices[k].str(), ", which has no TF32 (fp32 and bf16 run there)");
    SP_CHECK_ARG(!o.cudnn_benchmark(), field_name(Field::cudnn_benchmark), ": partition ", k + 1, " runs on ",
                 a.devices[k].str(), ", which has no cuDNN");
  }
  a.threads_per_worker.assign(partitions, threads_per_worker(o, partitions));
  return a;
}

optim::UpdateOptions update_options(const OptimizerOptions& o, int64_t steps_per_epoch) {
  const optim::UpdateOptions defaults;
  const auto& betas = o.betas();
  return optim::UpdateOptions()
      .kind(o.algorithm())
      .momentum(o.momentum())
      .weight_decay(o.weight_decay())
      .nesterov(o.nesterov())
      .beta1(betas.empty() ? defaults.beta1() : betas[0])
      .beta2(betas.empty() ? defaults.beta2() : betas[1])
      .eps(o.eps())
      .delay_nesterov(o.delay_nesterov())
      .delay_aware_lr(o.delay_aware_lr())
      .delay_lr_anneal_steps(std::llround(o.delay_lr_anneal_epochs() * static_cast<double>(steps_per_epoch)))
      .weight_prediction(o.weight_prediction())
      .spike_compensation(o.spike_compensation())
      .fixed_weight_norm(o.fixed_weight_norm());
}

uint64_t replica_seed(uint64_t seed, int replica) {
  if (replica == 0) return seed;
  // splitmix64's step and finaliser: replicas' seeds unrelated to each other and to seed + 1.
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(replica + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::unique_ptr<exec::Pipeline> build_stages(models::Model& model, const Assembly& a, const Options& options,
                                             int64_t steps_per_epoch, int replica) {
  const OptimizerOptions& o = options.optimizer();
  auto pipeline = std::make_unique<exec::Pipeline>(model, a.plan, a.devices, update_options(o, steps_per_epoch),
                                                   exec::Objective{o.loss(), o.metric()},
                                                   replica_seed(options.run().seed(), replica), memory_format(options),
                                                   options.pipeline().precision());
  // Process-wide in LibTorch, as in PyTorch; set for every run that has CUDA partitions.
  if (std::any_of(a.devices.begin(), a.devices.end(), [](const torch::Device& d) { return d.is_cuda(); })) {
    at::globalContext().setBenchmarkCuDNN(options.pipeline().cudnn_benchmark());
  }
  if (options.pipeline().cuda_graphs()) {
    exec::GraphSettings graphs;
    graphs.mode = exec::GraphMode::kCuda;
    graphs.option = field_name(Field::cuda_graphs);
    const auto slice = slice_range(options.data().batch_size(), options.pipeline().replicas(), replica);
    graphs.batch_size = slice.second - slice.first;  // what this replica's pipeline is fed
    for (auto* stage : pipeline->stages()) stage->use_graphs(graphs);
  }
  return pipeline;
}

Assembly assemble(models::Model& model, const Options& options, int64_t steps_per_epoch,
                  bool want_profile, int replica) {
  Assembly a = plan_pipeline(model, options, want_profile);
  const OptimizerOptions& o = options.optimizer();
  a.pipeline = build_stages(model, a, options, steps_per_epoch, replica);
  if (o.fixed_weight_norm() || options.pipeline().hybrid_norm_reset()) {
    int invariant = 0;
    for (auto* stage : a.pipeline->stages()) invariant += stage->optimizer().scale_invariant_count();
    SP_CHECK_ARG(invariant > 0,
                 field_name(o.fixed_weight_norm() ? Field::fixed_weight_norm : Field::hybrid_norm_reset),
                 ": model ", model.name, " has no bias-free conv or linear layer followed by a batch norm");
  }
  return a;
}

}  // namespace stalepipe
