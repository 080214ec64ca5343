#include "support/pipeline_runs.h"

#include <cmath>

#include <gtest/gtest.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "stalepipe/data/normalize.h"
#include "stalepipe/data/synthetic.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::test {
namespace {

constexpr double kWeightDecay = 5e-4;

models::Model build_model(const RunSpec& spec) {
  torch::manual_seed(spec.seed);
  models::InputShape input;
  input.channels = 1;
  if (spec.data == "synthetic-masks") input.num_classes = 4;
  return models::make_model(spec.model, input, models::ZooOptions().dropout(spec.dropout));
}

exec::Input input_at(const data::Loader& loader, int64_t step) {
  const int64_t per_epoch = loader.batches_per_epoch();
  const auto batch = loader.batch(step / per_epoch, step % per_epoch);
  return {batch.x, batch.y};
}

}  // namespace

RunSpec small_resnet20(std::vector<int> ppv) {
  RunSpec spec;
  spec.model = "resnet20";
  spec.ppv = std::move(ppv);
  spec.steps = 8;
  spec.batch_size = 4;
  spec.train_size = 24;
  spec.buffers = true;
  return spec;
}

data::Loader synthetic_loader(int64_t train_size, int64_t batch_size, uint64_t seed) {
  const auto split = data::make_synthetic(data::SyntheticOptions().train_size(train_size).test_size(16).seed(seed));
  return data::Loader(split.train, data::LoaderOptions()
                                       .batch_size(batch_size)
                                       .seed(seed)
                                       .pad_to(32)
                                       .normalization(data::compute_normalization(split.train)));
}

// Trains [first, end) with `kind` over the model's partitions.
void run_segment(const RunSpec& spec, exec::Pipeline& pipeline,
                 const data::Loader& loader, schedule::ScheduleKind kind, const std::string& executor,
                 int64_t first, int64_t end) {
  exec::SegmentContext context;
  context.input = [&](int64_t t) { return input_at(loader, t); };
  context.lr = [&](int64_t t) {
    if (!spec.cosine_lr) return spec.lr;
    return spec.lr * 0.5 * (1 + std::cos(M_PI * static_cast<double>(t) / static_cast<double>(spec.steps)));
  };
  context.threads_per_worker.assign(pipeline.num_stages(), 1);
  context.on_step = spec.on_step;
  context.read_losses_every = spec.read_losses_every;
  const int micro = kind == schedule::ScheduleKind::kGPipe ? spec.micro_batches : 1;
  const auto schedule = schedule::make_schedule(kind, pipeline.num_stages(), first, end, micro);
  exec::make_executor(exec::executor_from_name(executor))->run(schedule, pipeline.stages(), context);
}

exec::Pipeline make_pipeline(const RunSpec& spec, const models::Model& model) {
  const auto plan = partition::make_plan(model, spec.ppv, spec.recompute);
  return exec::Pipeline(model, plan, std::vector<torch::Device>(plan.num_partitions(), spec.device),
                        optim::UpdateOptions()
                            .momentum(spec.momentum)
                            .weight_decay(kWeightDecay)
                            .delay_aware_lr(spec.delay_aware_lr)
                            .weight_prediction(spec.weight_prediction)
                            .spike_compensation(spec.spike_compensation)
                            .fixed_weight_norm(spec.fixed_weight_norm),
                        exec::Objective{}, 0,
                        spec.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous,
                        spec.precision);
}

namespace {

data::Loader loader_for(const RunSpec& spec) {
  if (spec.data == "synthetic") return synthetic_loader(spec.train_size, spec.batch_size, spec.seed);
  EXPECT_EQ(spec.data, "synthetic-masks");
  const auto split = data::make_synthetic_masks(
      data::SyntheticOptions().train_size(spec.train_size).test_size(4).height(32).width(32).num_classes(4).seed(spec.seed));
  return data::Loader(split.train, data::LoaderOptions()
                                       .batch_size(spec.batch_size)
                                       .seed(spec.seed)
                                       .normalization(data::compute_normalization(split.train)));
}

}  // namespace

std::vector<torch::Tensor> run_pipeline(const RunSpec& spec) {
  at::set_num_threads(1);
  const auto loader = loader_for(spec);
  const auto model = build_model(spec);
  auto pipeline = make_pipeline(spec, model);
  exec::GraphSettings graphs;
  graphs.mode = spec.graphs;
  graphs.batch_size = spec.batch_size;
  for (auto* stage : pipeline.stages()) stage->use_graphs(graphs);
  if (spec.switch_step < 0) {
    run_segment(spec, pipeline, loader, spec.kind, spec.executor, spec.first_step, spec.steps);
  } else {
    run_segment(spec, pipeline, loader, spec.before_switch, spec.executor, spec.first_step, spec.switch_step);
    run_segment(spec, pipeline, loader, schedule::ScheduleKind::kSequential, spec.executor,
                spec.switch_step, spec.steps);
  }
  if (spec.inspect) spec.inspect(pipeline);
  auto state = pipeline.parameters();
  if (spec.buffers) {
    for (auto* stage : pipeline.stages()) {
      for (const auto& b : stage->module()->buffers()) state.push_back(b.detach().clone());
    }
  }
  return state;
}

std::vector<torch::Tensor> initial_parameters(const RunSpec& spec) {
  return build_model(spec).as_sequential()->parameters();
}

std::vector<torch::Tensor> run_reference(const RunSpec& spec) {
  at::set_num_threads(1);
  const auto loader = loader_for(spec);
  const auto model = build_model(spec);
  int64_t first = 0;
  if (spec.switch_step >= 0) {
    EXPECT_EQ(spec.momentum, 0.0) << "the reference cannot take over momentum buffers";
    auto pipeline = make_pipeline(spec, model);  // shares the model's modules
    run_segment(spec, pipeline, loader, schedule::ScheduleKind::kStale, "emulated", 0, spec.switch_step);
    first = spec.switch_step;
  }
  auto net = model.as_sequential();
  net->train();
  torch::optim::SGD sgd(net->parameters(),
                        torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(kWeightDecay));
  for (int64_t t = first; t < spec.steps; ++t) {
    const auto in = input_at(loader, t);
    sgd.zero_grad();
    torch::Tensor logits;
    {
      exec::AutocastScope autocast(spec.precision, torch::kCPU);  // bf16: LibTorch's autocast, whole model
      logits = model.forward(in.x);
    }
    torch::nn::functional::cross_entropy(logits.to(torch::kFloat), in.target).backward();
    sgd.step();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

::testing::AssertionResult all_equal(const std::vector<torch::Tensor>& a,
                                     const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " parameters";
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) {
      return ::testing::AssertionFailure()
             << "parameter " << i << " differs, max abs diff "
             << (a[i] - b[i]).abs().max().item<double>();
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const std::vector<torch::Tensor>& a,
                                     const std::vector<torch::Tensor>& b, double rtol, double atol) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " parameters";
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::allclose(a[i], b[i], rtol, atol)) {
      return ::testing::AssertionFailure()
             << "parameter " << i << " differs, max abs diff "
             << (a[i] - b[i]).abs().max().item<double>();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace stalepipe::test
