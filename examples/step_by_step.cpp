// Your own training loop over a pipeline: feed a mini-batch, get back the loss of an earlier
// one when it comes out of the last partition, drain with flush(), checkpoint, evaluate.
//
//   build/examples/step_by_step [STEPS=300] [DATA=fashion-mnist]
//
// Prints the pipeline (the zoo's LeNet-5 cut after layer 2, stale schedule, lag 1: feeding
// step t returns the loss of step t-1), every 50th loss as "fed 100, loss of 98: 0.9251 (lr
// 0.0495)" (steps count from 0), how many losses flush() returned (1), that a checkpoint
// saved to ./step_by_step_checkpoint and loaded into a fresh pipeline predicts the same, and
// the accuracy on the first 1000 test images (0.81 after 300 steps; ~15 s on 2 cores).
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "stalepipe/stalepipe.h"

int main(int argc, char** argv) try {
  const int64_t steps = argc > 1 ? std::stoll(argv[1]) : 300;
  const auto split = stalepipe::data::load_dataset(argc > 2 ? argv[2] : "fashion-mnist");
  // stalepipe's own loader: deterministic shuffling, 28x28 padded to the zoo's 32x32.
  auto options = stalepipe::data::LoaderOptions().batch_size(128).seed(1).pad_to(32)
                           .normalization(stalepipe::data::compute_normalization(split.train));
  const stalepipe::data::Loader loader(split.train, options);
  const stalepipe::models::InputShape input{1, 32, 32, 10};

  // A warm-up over the first 100 steps, as a pure function of the step (called by workers).
  stalepipe::Options pipeline_options;
  pipeline_options.pipeline().ppv({2}).executor(stalepipe::ExecutorKind::kThreads);
  pipeline_options.optimizer().lr_at([](int64_t t) { return 0.05 * std::min<double>(1.0, (t + 1) / 100.0); });
  torch::manual_seed(1);
  stalepipe::PipelineTrainer trainer(stalepipe::models::make_model("lenet5", input), pipeline_options);
  std::printf("lenet5, partitions %s | %s, staleness d=%d,%d, lag %d\n", trainer.info().units[0].c_str(),
              trainer.info().units[1].c_str(), trainer.info().staleness[0],
              trainer.info().staleness[1], trainer.info().lag);

  for (int64_t t = 0; t < steps; ++t) {
    const auto epoch = t / loader.batches_per_epoch();
    const auto batch = loader.batch(epoch, t % loader.batches_per_epoch());  // O(N) order each call
    if (auto loss = trainer.feed(batch.x, batch.y); loss && (t + 1) % 50 == 0) {
      std::printf("fed %lld, loss of %lld: %.4f (lr %.4f)\n", static_cast<long long>(t + 1),
                  static_cast<long long>(loss->step), loss->loss, pipeline_options.optimizer().lr_at()(loss->step));
    }
  }
  std::printf("flush returned %zu loss(es); pipeline drained\n", trainer.flush().size());

  const std::string dir = "step_by_step_checkpoint";
  trainer.save(dir);
  torch::manual_seed(2);  // different initial weights, replaced by load()
  stalepipe::PipelineTrainer restored(stalepipe::models::make_model("lenet5", input), pipeline_options);
  restored.load(dir);
  const auto test = stalepipe::data::Loader(split.test.subset(1000), options.batch_size(1000)).batch(0, 0);
  const auto logits = trainer.predict(test.x);
  std::printf("checkpoint at step %lld reloaded: same predictions %s\n",
              static_cast<long long>(restored.step()), torch::equal(logits, restored.predict(test.x)) ? "yes" : "NO");
  std::printf("test accuracy (1000 images) %.4f\n", logits.argmax(1).eq(test.y).to(torch::kDouble).mean().item<double>());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "step_by_step: %s\n", e.what());
  return 1;
}
