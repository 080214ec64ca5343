// Networks that are not a chain, through the CLI: the U-Net (a skip over a partition) and
// ResNet-20 cut inside its blocks train to the same bits on every executor, and with a drained
// pipeline after every step (--checkpoint-every 1) to the same bits as without any register.
#include <gtest/gtest.h>

#include "support/cli.h"
#include "support/pipeline_runs.h"
#include "support/ranks.h"
#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {

std::vector<std::string> unet_run(const std::string& ppv) {
  return {"train", "--model", "unet", "--data", "synthetic-masks:192", "--pipeline", ppv, "--batch-size", "16",
          "--epochs", "1", "--max-steps", "10", "--threads-per-worker", "1", "--checkpoint-every", "1",
          "--progress", "none"};
}

std::vector<std::string> resnet_run(const std::string& ppv) {
  return {"train", "--model", "resnet20", "--data", "synthetic:128", "--pipeline", ppv, "--batch-size", "16",
          "--epochs", "1", "--max-steps", "6", "--threads-per-worker", "1", "--checkpoint-every", "1",
          "--progress", "none"};
}

void expect_same_losses(const std::string& a, const std::string& b) {
  const auto sa = json_file(a + "/summary.json");
  const auto sb = json_file(b + "/summary.json");
  for (const char* key : {"test_loss", "test_accuracy", "train_loss", "steps"}) EXPECT_EQ(sa[key], sb[key]) << key;
}

TEST(SkipsCli, UNetWithASkipOverAPartitionTrainsAlikeEverywhereAndAsTheWholeNetwork) {
  TempDir emulated, threads, processes, whole;
  // enc1 goes from partition 1 straight to partition 3.
  const auto e = run_cli(with(unet_run("1,3"), {"--executor", "emulated", "--out", emulated.path()}));
  ASSERT_EQ(e.status, 0) << e.err;
  const auto t = run_cli(with(unet_run("1,3"), {"--executor", "threads", "--out", threads.path()}));
  ASSERT_EQ(t.status, 0) << t.err;
  expect_same_results(emulated.path(), threads.path());
  ASSERT_EQ(run_launch(3, with(unet_run("1,3"), {"--executor", "processes", "--out", processes.path()}),
                       processes.file("launch.log"), 240),
            0)
      << slurp(processes.file("launch.log"));
  expect_same_results(emulated.path(), processes.path());
  const auto w = run_cli(with(unet_run("none"), {"--out", whole.path()}));
  ASSERT_EQ(w.status, 0) << w.err;
  expect_same_losses(emulated.path(), whole.path());
  EXPECT_TRUE(all_equal(model_tensors(emulated.path(), "unet", "1,3", 4), model_tensors(whole.path(), "unet", "none", 4)));
}

TEST(SkipsCli, ResNet20CutInsideBlocksTrainsAlikeEverywhereAndAsTheWholeNetwork) {
  TempDir emulated, processes, whole;
  // After layer 8: inside block2_1, whose input goes to partition 2 with the activation.
  const auto e = run_cli(with(resnet_run("8"), {"--executor", "emulated", "--out", emulated.path()}));
  ASSERT_EQ(e.status, 0) << e.err;
  ASSERT_EQ(run_launch(2, with(resnet_run("8"), {"--executor", "processes", "--out", processes.path()}),
                       processes.file("launch.log"), 240),
            0)
      << slurp(processes.file("launch.log"));
  expect_same_results(emulated.path(), processes.path());
  const auto w = run_cli(with(resnet_run("none"), {"--out", whole.path()}));
  ASSERT_EQ(w.status, 0) << w.err;
  expect_same_losses(emulated.path(), whole.path());
  EXPECT_TRUE(all_equal(model_tensors(emulated.path(), "resnet20", "8"), model_tensors(whole.path(), "resnet20", "none")));
}

TEST(SkipsCli, ARegisterInsideAUnitAndPerPixelDataThatCannotFollowAreOneLine) {
  expect_one_line_error(run_cli({"train", "--model", "unet", "--data", "synthetic-masks:64", "--pipeline", "4",
                                 "--progress", "none"}),
                        2, "no register may follow layer 4 (inside unit 4 (dec2), which holds layers 4-5)");
  expect_one_line_error(run_cli({"train", "--model", "unet", "--data", "synthetic-masks:64", "--augment",
                                 "--progress", "none"}),
                        2, "has a class per pixel: its images cannot be augmented");
}

}  // namespace
}  // namespace stalepipe::test
