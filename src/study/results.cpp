// Collects finished runs into results.csv / results.md and the two plots.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/json_file_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/study/sweep.h"
#include "finished_runs_impl.h"
#include "svg_chart_impl.h"
#include "time_to_accuracy_impl.h"

namespace stalepipe::study {
namespace fs = std::filesystem;
namespace {

using detail::ByName;
using detail::Finished;
using detail::Spread;
using detail::fixed;
using detail::spread;

// A CSV field: quoted where it holds a comma or a quote (a run name or PPV such as "1,2").
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// results.csv: one row per run and seed.
void write_csv(const Experiment& experiment, const std::vector<Finished>& done) {
  const char* columns[] = {"model", "ppv", "partitions", "schedule", "hybrid_switch_step",
                           "stale_weight_percent", "epochs", "steps", "test_accuracy",
                           "test_loss", "train_loss", "images_per_second", "wall_seconds",
                           "peak_rss_mb", "executor"};
  std::ostringstream csv;
  csv << "run,seed";
  for (const char* c : columns) csv << "," << c;
  csv << "\n";
  for (const auto& f : done) {
    csv << csv_field(f.run->name) << "," << f.run->seed;
    if (f.diverged()) {
      csv << ",diverged\n";
      continue;
    }
    for (const char* c : columns) {
      const auto& v = f.summary.value(c, nlohmann::json());
      csv << "," << csv_field(v.is_string() ? v.get<std::string>() : v.dump());
    }
    csv << "\n";
  }
  write_file_atomic((fs::path(experiment.out) / "results.csv").string(), csv.str());
}

// One results.md row of run `name`; adds its point to `drops` when there is a baseline.
void write_row(std::ostringstream& md, ByName& g, const std::string& name, const Spread& base,
               std::vector<detail::Series>& drops) {
  const Finished* any = g.described(name);
  const auto& seeds = g.runs[name];
  const size_t diverged = g.diverged_count(name);
  const std::string diverged_note = diverged ? c10::str(" (", diverged, " of ", seeds.size(), " seeds diverged)") : "";
  if (!any) {
    md << "| " << name << " | " << seeds.front()->run->options.run().model() << " | "
       << partition::format_ppv(seeds.front()->run->options.pipeline().ppv()) << " | | | | " << seeds.size()
       << " | diverged" << diverged_note << " | | | | |\n";
    return;
  }
  const auto& first = any->summary;
  const Spread acc = spread(g.accuracies(name));
  std::vector<double> ips, wall, rss;
  for (const auto* f : seeds) {
    if (f->diverged()) continue;
    ips.push_back(f->summary.at("images_per_second").get<double>());
    wall.push_back(f->summary.at("wall_seconds").get<double>());
    rss.push_back(f->summary.value("peak_rss_mb", 0.0));
  }
  const double stale = first.at("stale_weight_percent").get<double>();
  md << "| " << name << " | " << first.at("model").get<std::string>() << " | "
     << first.at("ppv").get<std::string>() << " | " << first.at("partitions") << " | "
     << (first.at("partitions").get<int>() == 1 ? "none" : first.at("schedule").get<std::string>()) << " | "
     << fixed(stale, 1) << " | " << seeds.size() << " | " << fixed(acc.mean, 2)
     << (acc.n > 1 ? " ± " + fixed(acc.std, 2) : "") << diverged_note << " | "
     << (g.baseline.empty() ? "-" : fixed(base.mean - acc.mean, 2)) << " | "
     << fixed(spread(ips).mean, 0) << " | " << fixed(spread(wall).mean, 0) << " | "
     << fixed(spread(rss).mean, 0) << " |\n";
  if (!g.baseline.empty()) drops.push_back({name, {stale}, {base.mean - acc.mean}, {acc.std}});
}

// results.md: one row per run over its seeds, with the drop against the baseline. Returns the
// drop of each run (for drop_vs_stale.svg).
std::vector<detail::Series> write_markdown(const Experiment& experiment, ByName& g) {
  const Spread base = g.baseline.empty() ? Spread{} : spread(g.accuracies(g.baseline));
  std::ostringstream md;
  md << "| run | model | PPV | K | schedule | stale weights (%) | seeds | test accuracy (%) | drop (points) | images/s | wall (s) | peak RSS (MB) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<detail::Series> drops;  // one per run, so the legend names the points
  for (const auto& name : g.order) write_row(md, g, name, base, drops);
  md << "\nAccuracy: mean ± sample standard deviation over the seeds that did not diverge; "
        "drop: baseline ("
     << (g.baseline.empty() ? "none" : g.baseline) << ") mean minus run mean.\n";
  md << detail::time_to_target_markdown(g);
  write_file_atomic((fs::path(experiment.out) / "results.md").string(), md.str());
  return drops;
}

// Test accuracy per epoch, seed-averaged, one line per run.
std::vector<detail::Series> accuracy_curves(ByName& g) {
  std::vector<detail::Series> curves;
  for (const auto& name : g.order) {
    if (!g.described(name)) continue;
    detail::Series s{name, {}, {}, {}};
    size_t epochs = g.described(name)->test_accuracy_per_epoch.size();
    for (const auto* f : g.runs[name]) {
      if (!f->diverged()) epochs = std::min(epochs, f->test_accuracy_per_epoch.size());
    }
    for (size_t e = 0; e < epochs; ++e) {
      std::vector<double> v;
      for (const auto* f : g.runs[name]) {
        if (!f->diverged()) v.push_back(100 * f->test_accuracy_per_epoch[e]);
      }
      s.x.push_back(static_cast<double>(e + 1));
      s.y.push_back(spread(v).mean);
    }
    curves.push_back(s);
  }
  return curves;
}

}  // namespace

void write_results(const Experiment& experiment) {
  const std::vector<Finished> done = detail::read_finished(experiment);
  fs::create_directories(experiment.out);
  write_csv(experiment, done);
  ByName g(done);
  const auto drops = write_markdown(experiment, g);
  const std::string title = fs::path(experiment.path).stem().string();
  write_file_atomic((fs::path(experiment.out) / "accuracy.svg").string(),
                    detail::svg_chart(title + ": test accuracy", "epoch", "test accuracy (%)",
                                      accuracy_curves(g), true));
  const auto over_time = detail::accuracy_time_curves(g);
  if (!over_time.empty()) {
    write_file_atomic((fs::path(experiment.out) / "accuracy_vs_time.svg").string(),
                      detail::svg_chart(title + ": test accuracy against training time", "training time (s)",
                                        "test accuracy (%)", over_time, true));
  }
  write_file_atomic((fs::path(experiment.out) / "drop_vs_stale.svg").string(),
                    detail::svg_chart(title + ": accuracy drop vs stale weights", "stale weights (%)",
                                      "drop against the baseline (points)", drops, false));
}

}  // namespace stalepipe::study
