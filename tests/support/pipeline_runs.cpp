#include "support/pipeline_runs.h"

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

constexpr double kMomentum = 0.9;
constexpr double kWeightDecay = 5e-4;

models::Model build_model(const RunSpec& spec) {
  torch::manual_seed(spec.seed);
  models::InputShape input;
  input.channels = 1;
  return models::make_model(spec.model, input);
}

exec::Input input_at(const data::Loader& loader, int64_t step) {
  const int64_t per_epoch = loader.batches_per_epoch();
  const auto batch = loader.batch(step / per_epoch, step % per_epoch);
  return {batch.x, batch.y};
}

}  // namespace

data::Loader synthetic_loader(int64_t train_size, int64_t batch_size, uint64_t seed) {
  const auto split = data::make_synthetic(data::SyntheticOptions().train_size(train_size).test_size(16).seed(seed));
  return data::Loader(split.train, data::LoaderOptions()
                                       .batch_size(batch_size)
                                       .seed(seed)
                                       .pad_to(32)
                                       .normalization(data::compute_normalization(split.train)));
}

std::vector<torch::Tensor> run_pipeline(const RunSpec& spec) {
  at::set_num_threads(1);
  const auto loader = synthetic_loader(spec.train_size, spec.batch_size, spec.seed);
  const auto model = build_model(spec);
  const auto plan = partition::make_plan(model, spec.ppv);
  const int K = plan.num_partitions();
  exec::Pipeline pipeline(model, plan, std::vector<torch::Device>(K, torch::kCPU),
                          optim::SgdOptions().momentum(kMomentum).weight_decay(kWeightDecay));
  exec::SegmentContext context;
  context.input = [&](int64_t t) { return input_at(loader, t); };
  context.lr = [&](int64_t) { return spec.lr; };
  context.threads_per_worker.assign(K, 1);
  const auto schedule = schedule::make_schedule(spec.kind, K, 0, spec.steps);
  exec::make_executor(spec.executor)->run(schedule, pipeline.stages(), context);
  return pipeline.parameters();
}

std::vector<torch::Tensor> run_reference(const RunSpec& spec) {
  at::set_num_threads(1);
  const auto loader = synthetic_loader(spec.train_size, spec.batch_size, spec.seed);
  const auto model = build_model(spec);
  auto net = model.as_sequential();
  net->train();
  torch::optim::SGD sgd(net->parameters(),
                        torch::optim::SGDOptions(spec.lr).momentum(kMomentum).weight_decay(kWeightDecay));
  for (int64_t t = 0; t < spec.steps; ++t) {
    const auto in = input_at(loader, t);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(in.x), in.labels).backward();
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

}  // namespace stalepipe::test
