#include "stalepipe/partition/plan.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "stalepipe/common/error.h"
#include "stalepipe/models/model.h"
#include "stalepipe/models/skips.h"

namespace stalepipe::partition {

std::vector<int> parse_ppv(const std::string& text, const std::string& what) {
  std::vector<int> ppv;
  if (text.empty() || text == "none") return ppv;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SP_CHECK_ARG(used == item.size() && !item.empty(), what, " ", text, ": '", item,
                 "' is not a layer number; expected a comma-separated list such as 7,13");
    ppv.push_back(value);
  }
  return ppv;
}

std::string format_ppv(const std::vector<int>& ppv) {
  if (ppv.empty()) return "none";
  std::ostringstream out;
  for (size_t i = 0; i < ppv.size(); ++i) out << (i ? "," : "") << ppv[i];
  return out.str();
}

std::string format_cut_layers(const models::Model& model) {
  std::ostringstream out;
  const auto cuts = model.cut_layers();
  for (size_t i = 0; i < cuts.size(); ++i) out << (i ? ", " : "") << cuts[i];
  return out.str();
}

namespace {

// Why a register cannot follow `layer`: the unit that holds it, and where inside it the layer is.
std::string unit_holding(const models::Model& model, int layer) {
  for (size_t i = 0; i < model.units.size(); ++i) {
    const auto& layers = model.units[i].weight_layers;
    if (layers.empty() || layer < layers.front() || layer > layers.back()) continue;
    const std::string unit = c10::str("unit ", i + 1, " (", model.units[i].name, ")");
    if (layer != layers.back()) {
      const std::string& why = model.units[i].joined;
      return c10::str("inside ", unit, ", which holds layers ", layers.front(), "-", layers.back(),
                      why.empty() ? "" : " together: " + why);
    }
    return unit + " does not allow a register after it";
  }
  return "no unit holds it";
}

std::vector<SkipRoute> skip_routes(const models::Model& model, const Plan& plan) {
  std::vector<models::OpenSkips> open;  // per partition, as its stage will see them
  std::map<std::string, int> consumer;
  for (int k = 0; k < plan.num_partitions(); ++k) {
    std::vector<models::Skips> skips;
    for (size_t u = plan.unit_ranges[k].first; u < plan.unit_ranges[k].second; ++u) skips.push_back(model.units[u].skips);
    open.push_back(models::open_skips(skips));
    for (const std::string& name : open.back().in) consumer[name] = k;
  }
  std::vector<SkipRoute> routes;
  for (int k = 0; k < plan.num_partitions(); ++k) {
    // check_skips: every stash has its pop, in a later unit
    for (const std::string& name : open[k].out) routes.push_back({name, k, consumer.at(name)});
  }
  return routes;
}

}  // namespace

size_t units_through_layer(const models::Model& model, int layer, const std::string& what) {
  if (layer == 0) return 0;
  const int layers = model.num_weight_layers();
  const std::string where = c10::str(what, " ", layer, ": model ", model.name);
  SP_CHECK_ARG(layer >= 1 && layer <= layers, where, " has ", layers,
               " weight layers; recomputation may end after layer ", format_cut_layers(model));
  const int unit = model.unit_ending_at_layer(layer);
  SP_CHECK_ARG(unit >= 0, where, ": recomputation cannot end after layer ", layer, " (",
               unit_holding(model, layer), "); it may end after layer ", format_cut_layers(model));
  return static_cast<size_t>(unit) + 1;
}

size_t Plan::recomputed_units(int k) const {
  const auto [begin, end] = unit_ranges.at(k);
  return recompute_units <= begin ? 0 : std::min(recompute_units, end) - begin;
}

Plan make_plan(const models::Model& model, const std::vector<int>& ppv, int recompute_layer,
               const std::string& ppv_name, const std::string& recompute_name) {
  const std::string where = ppv_name + " " + format_ppv(ppv) + ": model " + model.name;
  const int layers = model.num_weight_layers();
  models::check_skips(model.name, model.units);
  Plan plan;
  plan.ppv = ppv;
  plan.recompute_units = units_through_layer(model, recompute_layer, recompute_name);
  size_t first = 0;
  for (size_t i = 0; i < ppv.size(); ++i) {
    const int layer = ppv[i];
    SP_CHECK_ARG(i == 0 || layer > ppv[i - 1], where, ": register positions must increase, got ",
                 ppv[i - 1], " then ", layer);
    SP_CHECK_ARG(layer >= 1 && layer < layers, where, " has ", layers,
                 " weight layers; a register may follow layer ", format_cut_layers(model));
    const int unit = model.unit_ending_at_layer(layer);
    SP_CHECK_ARG(unit >= 0, where, ": no register may follow layer ", layer, " (",
                 unit_holding(model, layer), "); a register may follow layer ",
                 format_cut_layers(model));
    plan.unit_ranges.emplace_back(first, static_cast<size_t>(unit) + 1);
    first = static_cast<size_t>(unit) + 1;
  }
  plan.unit_ranges.emplace_back(first, model.units.size());
  for (const auto& [begin, end] : plan.unit_ranges) {
    SP_CHECK_ARG(end > begin, where, ": a partition would hold no unit");
    int64_t count = 0;
    for (size_t u = begin; u < end; ++u) {
      for (const auto& p : model.units[u].module.ptr()->parameters()) {
        if (p.requires_grad()) count += p.numel();
      }
    }
    plan.parameters.push_back(count);
  }
  plan.skips = skip_routes(model, plan);
  return plan;
}

std::string format_skip_routes(const Plan& plan) {
  if (plan.skips.empty()) return "none";
  std::ostringstream out;
  for (size_t i = 0; i < plan.skips.size(); ++i) {
    out << (i ? ", " : "") << plan.skips[i].name << ": partition " << plan.skips[i].from + 1 << " -> "
        << plan.skips[i].to + 1;
  }
  return out.str();
}

double stale_weight_percent(const Plan& plan, const std::vector<int>& staleness) {
  int64_t total = 0, stale = 0;
  for (size_t k = 0; k < plan.parameters.size(); ++k) {
    total += plan.parameters[k];
    if (k < staleness.size() && staleness[k] > 0) stale += plan.parameters[k];
  }
  return total == 0 ? 0.0 : 100.0 * static_cast<double>(stale) / static_cast<double>(total);
}

}  // namespace stalepipe::partition
