// Any network a user brings: dropout stays exact on every executor, any target and loss
// trains, accuracy exists only where a metric scores samples.
#include <gtest/gtest.h>
#include <torch/data/example.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "stalepipe/stalepipe.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/models/dropout.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

namespace nn = torch::nn;

// Three units with stock dropout in two of them (replaced by the builder), outputs `outputs`.
models::Model dropout_net(uint64_t seed, double p, int64_t outputs = 10) {
  torch::manual_seed(seed);
  return models::ModelBuilder("dropnet", {1, 16, 16, outputs})
      .add("conv1", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)), nn::ReLU(),
                                   nn::Dropout2d(p), nn::MaxPool2d(2)))
      .add("conv2", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(8, 8, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2)))
      .add("fc", nn::Sequential(nn::Flatten(), nn::Dropout(p), nn::Linear(8 * 4 * 4, outputs)))
      .build();
}

Options options_for(const std::string& executor, uint64_t seed = 1) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant).lr(0.05);
  o.pipeline().ppv({1, 2}).executor(exec::executor_from_name(executor)).threads_per_worker(1);
  o.run().seed(seed);
  return o;
}

std::vector<exec::Input> batches(int n, bool regression) {
  torch::manual_seed(77);
  std::vector<exec::Input> out;
  for (int i = 0; i < n; ++i) {
    auto x = torch::randn({8, 1, 16, 16});
    out.push_back({x, regression ? x.mean({1, 2, 3}).unsqueeze(1) : torch::randint(10, {8})});
  }
  return out;
}

std::vector<torch::Tensor> train(models::Model model, const Options& options, bool regression = false) {
  PipelineTrainer trainer(std::move(model), options);
  for (const auto& b : batches(12, regression)) trainer.feed(b.x, b.target);
  trainer.finish();
  return trainer.parameters();
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(Objective, DropoutIsBitIdenticalOnEveryExecutorAndOverRepeatedRuns) {
  const auto emulated = train(dropout_net(3, 0.5), options_for("emulated"));
  EXPECT_TRUE(same(train(dropout_net(3, 0.5), options_for("emulated")), emulated));
  for (int repeat = 0; repeat < 3; ++repeat) {
    EXPECT_TRUE(same(train(dropout_net(3, 0.5), options_for("threads")), emulated)) << "threads, run " << repeat;
  }
  Options gpipe = options_for("threads");
  gpipe.pipeline().schedule(ScheduleKind::kGPipe).micro_batches(2);
  Options gpipe_emulated = options_for("emulated");
  gpipe_emulated.pipeline().schedule(ScheduleKind::kGPipe).micro_batches(2);
  EXPECT_TRUE(same(train(dropout_net(3, 0.5), gpipe), train(dropout_net(3, 0.5), gpipe_emulated)));
  // Not blind: the masks depend on the run's seed, and dropout does act.
  EXPECT_FALSE(same(train(dropout_net(3, 0.5), options_for("emulated", 2)), emulated));
  EXPECT_FALSE(same(train(dropout_net(3, 0.0), options_for("emulated")), emulated));
}

TEST(Objective, ADropoutRunResumedFromACheckpointEqualsTheWholeRun) {
  const auto data = batches(12, false);
  // The whole run drains where the other one saves (a checkpoint is a segment boundary).
  PipelineTrainer uninterrupted(dropout_net(3, 0.5), options_for("threads"));
  for (int t = 0; t < 12; ++t) {
    if (t == 5) uninterrupted.flush();
    uninterrupted.feed(data[t].x, data[t].target);
  }
  uninterrupted.finish();
  const auto whole = uninterrupted.parameters();
  test::TempDir dir;
  {
    PipelineTrainer first(dropout_net(3, 0.5), options_for("threads"));
    for (int t = 0; t < 5; ++t) first.feed(data[t].x, data[t].target);
    first.flush();
    first.save(dir.path());
  }
  PipelineTrainer resumed(dropout_net(9, 0.5), options_for("threads"));  // other initial weights: load replaces them
  resumed.load(dir.path());
  EXPECT_EQ(resumed.step(), 5);
  for (int t = 5; t < 12; ++t) resumed.feed(data[t].x, data[t].target);
  resumed.finish();
  EXPECT_TRUE(same(resumed.parameters(), whole));
}

TEST(Objective, RegressionWithMseTrainsBitIdenticallyAndReportsNoAccuracy) {
  Options o = options_for("emulated");
  o.optimizer().loss("mse");
  const auto emulated = train(dropout_net(4, 0.0, 1), o, true);
  o.pipeline().executor(ExecutorKind::kThreads);
  EXPECT_TRUE(same(train(dropout_net(4, 0.0, 1), o, true), emulated));

  PipelineTrainer trainer(dropout_net(4, 0.0, 1), o);
  std::vector<torch::data::Example<>> data;
  for (const auto& b : batches(12, true)) data.push_back({b.x, b.target});
  const double before = trainer.evaluate(data).loss;
  int64_t scored = 0;
  FitHooks hooks;
  hooks.on_step = [&](const StepLoss& s) { scored += s.scored; };
  const auto epochs = trainer.fit(data, 3, hooks);
  EXPECT_EQ(scored, 0);
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_FALSE(epochs.back().train_accuracy.has_value());
  const EvalResult after = trainer.evaluate(data);
  EXPECT_FALSE(after.accuracy.has_value());
  EXPECT_LT(after.loss, before);
}

TEST(Objective, AUserMetricMakesAccuracyOfAnyTarget) {
  Options o = options_for("threads");
  o.optimizer().loss("mse").metric([](const torch::Tensor& out, const torch::Tensor& y) {
    return exec::Score{(out - y).abs().lt(1.0).sum().item<int64_t>(), y.size(0)};
  });
  PipelineTrainer trainer(dropout_net(4, 0.0, 1), o);
  std::vector<torch::data::Example<>> data;
  for (const auto& b : batches(4, true)) data.push_back({b.x, b.target});
  const auto epochs = trainer.fit(data, 1);
  ASSERT_TRUE(epochs.back().train_accuracy.has_value());
  EXPECT_GE(*epochs.back().train_accuracy, 0.0);
  EXPECT_TRUE(trainer.evaluate(data).accuracy.has_value());
}

TEST(Objective, LossesByNameRoundTripThroughTheConfigAndUnknownNamesAreRefused) {
  Options o;
  o.optimizer().loss("nll");
  EXPECT_EQ(options_from_json(to_json(o), "test").optimizer().loss().name(), "nll");
  EXPECT_EQ(config_hash(Options()), config_hash(options_from_json(to_json(Options()), "test")));
  EXPECT_NE(config_hash(o), config_hash(Options()));
  try {
    exec::Loss bad("hinge");
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    // exec/ speaks of the name; the option tree's reader names the field it came from.
    EXPECT_EQ(std::string(e.what()).rfind("'hinge' is not a loss stalepipe knows by name", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("cross-entropy, nll, mse"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::error_of<UsageError>([] { options_from_json({{"loss", "hinge"}}, "run/config.json"); })
                .rfind("run/config.json: loss 'hinge' is not a loss", 0),
            0u);
  o.optimizer().loss([](const torch::Tensor& out, const torch::Tensor& y) { return (out - y).abs().mean(); });
  EXPECT_EQ(o.optimizer().loss().name(), "custom");
  EXPECT_THROW(options_from_json(to_json(o), "config.json"), UsageError);
}

TEST(Objective, ALossThatIsNotAScalarFailsNamingIt) {
  Options o = options_for("emulated");
  o.optimizer().loss(exec::Loss([](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::nn::functional::mse_loss(out, y, torch::nn::functional::MSELossFuncOptions(torch::kNone));
  }, "per-sample"));
  PipelineTrainer trainer(dropout_net(4, 0.0, 1), o);
  const auto b = batches(1, true).front();
  try {
    trainer.feed(b.x, b.target);
    trainer.flush();
    FAIL() << "expected a RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("the loss (per-sample) gave [8, 1]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stalepipe
