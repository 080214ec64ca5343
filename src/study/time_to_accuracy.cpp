#include "time_to_accuracy_impl.h"

#include <algorithm>
#include <cmath>
#include <map>
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

// The time_to_target entry of `f` for `target`; null if it has none (or diverged).
const nlohmann::json* target_entry(const Finished& f, double target) {
  if (f.diverged() || !f.summary.contains("time_to_target")) return nullptr;
  for (const auto& t : f.summary.at("time_to_target")) {
    if (t.at("target").get<double>() == target) return &t;
  }
  return nullptr;
}

// Training seconds until `f` reached `target`; nullopt if it did not (or diverged).
std::optional<double> time_of(const Finished& f, double target) {
  const nlohmann::json* t = target_entry(f, target);
  if (!t || !t->at("reached").get<bool>()) return std::nullopt;
  return t->at("wall_seconds").get<double>();
}

// Training seconds to `target` of each seed of `name` that reached it, and the seeds counted
// (those with the target, and the diverged: a diverged seed never reaches it).
std::pair<std::vector<double>, size_t> times_to(ByName& g, const std::string& name, double target) {
  std::vector<double> times;
  size_t seeds = 0;
  for (const Finished* f : g.runs[name]) {
    if (!f->diverged() && !target_entry(*f, target)) continue;
    ++seeds;
    if (const auto time = time_of(*f, target)) times.push_back(*time);
  }
  return {times, seeds};
}

// Times compare within one machine: both runs trained on the same single machine, or neither
// recorded one (runs from before summary.json's "machines").
bool same_machine(const Finished& a, const Finished& b) { return a.machines == b.machines && a.machines.size() <= 1; }

// How many times sooner `name` reached `target` than `reference`: per seed, the reference's
// time on that seed and machine over the run's (so that seeds trained in sittings on different
// machines still compare), and the geometric mean of those ratios (so that A against B is the
// inverse of B against A); nullopt unless every seed has such a pair.
std::optional<double> speedup(ByName& g, const std::string& name, const std::string& reference, double target) {
  std::vector<double> log_ratios;
  for (const Finished* f : g.runs[name]) {
    const auto time = time_of(*f, target);
    if (!time) return std::nullopt;
    const Finished* base = nullptr;
    for (const Finished* r : g.runs[reference]) {
      if (r->run->seed == f->run->seed) base = r;
    }
    const auto base_time = base ? time_of(*base, target) : std::nullopt;
    if (!base_time || !same_machine(*f, *base) || *time <= 0) return std::nullopt;
    log_ratios.push_back(std::log(*base_time / *time));
  }
  if (log_ratios.empty()) return std::nullopt;
  return std::exp(spread(log_ratios).mean);
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
    const auto ratio = speedup(g, name, reference, target);
    ratios.push_back(ratio ? fixed(*ratio, 2) + "x" : "-");
    any = any || ratio;
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
         ", each divided by the run's on the same seed and machine, geometric mean over the seeds, where every "
         "seed of both reached the target (-: not every seed has such a pair).";
}

// Which machines trained the runs, and how many runs each, so that the times can be read.
std::string machines_line(ByName& g) {
  std::map<std::string, int> runs;
  std::vector<std::string> order;
  for (const auto& name : g.order) {
    for (const Finished* f : g.runs[name]) {
      if (f->diverged()) continue;
      std::string where;
      for (const auto& m : f->machines) where += (where.empty() ? "" : " then ") + m;
      if (where.empty()) where = "not recorded";
      if (runs[where]++ == 0) order.push_back(where);
    }
  }
  std::string line = "Trained on: ";
  for (size_t i = 0; i < order.size(); ++i) {
    line += (i ? "; " : "") + order[i] + " (" + std::to_string(runs[order[i]]) + (runs[order[i]] == 1 ? " run)" : " runs)");
  }
  return line + ".";
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
     << ratio_legend(g) << "\n\n" << machines_line(g) << "\n";
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
