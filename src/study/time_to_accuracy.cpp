#include "time_to_accuracy_impl.h"

#include <algorithm>
#include <optional>
#include <sstream>

namespace stalepipe::study::detail {
namespace {

// The targets of the first run that has any, in its order.
std::vector<double> targets_of(ByName& g) {
  for (const auto& name : g.order) {
    const Finished* f = g.described(name);
    if (!f || !f->summary.contains("time_to_target")) continue;
    std::vector<double> targets;
    for (const auto& t : f->summary.at("time_to_target")) targets.push_back(t.at("target").get<double>());
    if (!targets.empty()) return targets;
  }
  return {};
}

// Training seconds to `target` of each seed of `name` that reached it, and the seeds counted.
std::pair<std::vector<double>, size_t> times_to(ByName& g, const std::string& name, double target) {
  std::vector<double> times;
  size_t seeds = 0;
  for (const Finished* f : g.runs[name]) {
    if (f->diverged()) {
      ++seeds;  // a diverged seed never reaches it
      continue;
    }
    for (const auto& t : f->summary.value("time_to_target", nlohmann::json::array())) {
      if (t.at("target").get<double>() != target) continue;
      ++seeds;
      if (t.at("reached").get<bool>()) times.push_back(t.at("wall_seconds").get<double>());
    }
  }
  return {times, seeds};
}

// Mean time when every seed reached the target; nullopt otherwise.
std::optional<double> mean_time(ByName& g, const std::string& name, double target) {
  const auto [times, seeds] = times_to(g, name, target);
  if (seeds == 0 || times.size() != seeds) return std::nullopt;
  return spread(times).mean;
}

std::string seconds_text(double s) { return fixed(s, s < 10 ? 2 : 0) + " s"; }

std::string cell(ByName& g, const std::string& name, double target) {
  const auto [times, seeds] = times_to(g, name, target);
  if (seeds == 0) return "-";
  if (times.empty()) return "not reached";
  std::string text = seconds_text(spread(times).mean);
  if (times.size() < seeds) return text + " (" + std::to_string(times.size()) + " of " + std::to_string(seeds) + " seeds)";
  // One speed-up per reference, in order, so that the columns of ratios line up.
  std::vector<std::string> ratios;
  bool any = false;
  for (const auto& reference : g.time_references) {
    const auto base = mean_time(g, reference, target);
    ratios.push_back(base ? fixed(*base / spread(times).mean, 2) + "x" : "-");
    any = any || base;
  }
  if (!any) return text;
  text += " (";
  for (size_t i = 0; i < ratios.size(); ++i) text += (i ? " / " : "") + ratios[i];
  return text + ")";
}

// What the parenthesised ratios of the cells are.
std::string ratio_legend(const ByName& g) {
  if (g.time_references.empty()) return "no baseline run, so no speed-ups.";
  std::string times;
  for (size_t i = 0; i < g.time_references.size(); ++i) times += (i ? " / " : "") + g.time_references[i];
  return "(Nx): the time of " + times +
         ", each divided by the run's, where every seed of both reached the target (-: that run did not).";
}

}  // namespace

std::string time_to_target_markdown(ByName& g) {
  const std::vector<double> targets = targets_of(g);
  if (targets.empty()) return "";
  std::ostringstream md;
  md << "\n### Time to accuracy\n\n| run | seeds |";
  for (double t : targets) md << " to " << fixed(t, t == static_cast<int>(t) ? 0 : 1) << "% |";
  md << "\n|---|---|";
  for (size_t i = 0; i < targets.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& name : g.order) {
    md << "| " << name << " | " << g.runs[name].size() << " |";
    for (double t : targets) md << " " << cell(g, name, t) << " |";
    md << "\n";
  }
  md << "\nTraining seconds (evaluation excluded) until the test accuracy first reached the target, mean over "
        "the seeds; "
     << ratio_legend(g) << "\n";
  return md.str();
}

std::vector<Series> accuracy_time_curves(ByName& g) {
  std::vector<Series> curves;
  for (const auto& name : g.order) {
    std::vector<const Finished*> seeds;
    for (const Finished* f : g.runs[name]) {
      if (!f->diverged() && !f->evaluations.empty()) seeds.push_back(f);
    }
    if (seeds.empty()) continue;
    size_t points = seeds.front()->evaluations.size();
    for (const Finished* f : seeds) points = std::min(points, f->evaluations.size());
    Series s{name, {}, {}, {}};
    for (size_t i = 0; i < points; ++i) {
      std::vector<double> seconds, accuracy;
      for (const Finished* f : seeds) {
        seconds.push_back(f->evaluations[i].wall_seconds);
        accuracy.push_back(f->evaluations[i].accuracy);
      }
      const Spread a = spread(accuracy);
      s.x.push_back(spread(seconds).mean);
      s.y.push_back(a.mean);
      s.y_spread.push_back(a.std);
    }
    curves.push_back(s);
  }
  return curves;
}

}  // namespace stalepipe::study::detail
