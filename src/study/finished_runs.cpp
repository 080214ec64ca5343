#include "finished_runs_impl.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_file_impl.h"

namespace stalepipe::study::detail {
namespace fs = std::filesystem;
namespace {

// metrics.jsonl: epoch lines (no "type" in 0.2) and, from 0.3, eval lines within epochs.
void read_metrics(const fs::path& path, Finished& f) {
  std::ifstream metrics(path);
  std::string line;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    const bool eval = j.value("type", std::string("epoch")) == "eval";
    const bool has_accuracy = j.contains("test_accuracy");
    if (!eval && has_accuracy) f.test_accuracy_per_epoch.push_back(j.at("test_accuracy").get<double>());
    if (!has_accuracy) continue;
    f.evaluations.push_back({j.value("step", int64_t{0}), j.value("wall_seconds", 0.0),
                             100 * j.at("test_accuracy").get<double>()});
  }
}

}  // namespace

Spread spread(const std::vector<double>& v) {
  Spread s;
  s.n = v.size();
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

std::string fixed(double v, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << v;
  return out.str();
}


std::vector<Finished> read_finished(const Experiment& experiment) {
  std::vector<Finished> done;
  for (const auto& run : experiment.runs) {
    const fs::path dir = run.options.run().out();
    if (fs::exists(dir / "diverged.json") && !fs::exists(dir / "summary.json")) {
      done.push_back(Finished{&run, nlohmann::json(), {}, {}, {}});
      continue;
    }
    if (!fs::exists(dir / "summary.json")) continue;
    Finished f{&run, read_json_file((dir / "summary.json").string()), {}, {}, {}};
    read_metrics(dir / "metrics.jsonl", f);
    f.machines = f.summary.value("machines", std::vector<std::string>{});
    done.push_back(std::move(f));
  }
  return done;
}

}  // namespace stalepipe::study::detail
