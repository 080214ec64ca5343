#include "support/train_runs.h"

#include <fstream>

#include "stalepipe/api/options_json.h"

namespace stalepipe::test {

Options small_run(const std::string& pipeline, const nlohmann::json& changes) {
  nlohmann::json j = {{"model", "lenet5"}, {"data", "synthetic:200"}, {"epochs", 2},
                      {"batch_size", 32},  // 7 steps per epoch, the last one partial
                      {"lr", 0.05},        {"pipeline", pipeline}, {"threads", 2}, {"progress", "none"}};
  j.update(changes);
  return options_from_json(j, "test");
}

train::TrainHooks quiet_hooks() {
  train::TrainHooks hooks;
  hooks.log = [](const std::string&) {};
  return hooks;
}

std::vector<nlohmann::json> metrics_lines(const std::string& dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* timing : {"images_per_second", "wall_seconds"}) j.erase(timing);
    lines.push_back(j);
  }
  return lines;
}

}  // namespace stalepipe::test
