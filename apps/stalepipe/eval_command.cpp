// `stalepipe eval --run DIR`: the test loss and accuracy of a run's last checkpoint.
#include <cstdio>

#include "commands.h"
#include "stalepipe/train/trainer.h"

namespace stalepipe::cli {

Command add_eval(CLI::App& app) {
  auto run = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  app.add_option("--run", *run, "run directory written by train --out")->required();
  app.add_option("--threads", *threads, "intra-op threads (0: all cores)");
  return [run, threads]() {
    const EvalResult result = train::evaluate_run(*run, *threads);
    std::printf("test_loss %.6f\n", result.loss);
    if (result.accuracy) std::printf("test_accuracy %.4f\n", *result.accuracy);
    return 0;
  };
}

}  // namespace stalepipe::cli
