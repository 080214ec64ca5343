#include "stalepipe/sim/table5.h"

#include <cstdio>

#include "stalepipe/common/error.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/simulate.h"

namespace stalepipe::sim {
namespace {

// Long enough that the steady state, which cuts 2K steps at each end, dominates.
constexpr int64_t kSteps = 200;

// The whole model on one device: the two partitions' costs added.
PartitionCosts one_device(const PartitionCosts& c) {
  PartitionCosts whole;
  whole.forward_seconds = {c.forward_seconds[0] + c.forward_seconds[1]};
  whole.backward_seconds = {c.backward_seconds[0] + c.backward_seconds[1]};
  return whole;
}

}  // namespace

const std::vector<PaperTable5Row>& paper_table5() {
  static const std::vector<PaperTable5Row> rows = {{"resnet56", 19, 1.65, 1.24},
                                                   {"resnet110", 37, 1.73, 1.26},
                                                   {"resnet224", 75, 1.81, 1.28},
                                                   {"resnet362", 121, 1.82, 1.29}};
  return rows;
}

Table5Prediction predict_table5_row(const partition::Profile& profile, const partition::Plan& plan,
                                    const PaperTable5Row& paper, const std::vector<LinkModel>& links) {
  SP_CHECK_ARG(profile.model == paper.model, "the paper's row for ", paper.model, " needs a profile of ",
               paper.model, ", got one of ", profile.model);
  SP_CHECK_ARG(plan.num_partitions() == 2, "the paper's 2-GPU runs have 2 partitions; the plan of ",
               paper.model, " has ", plan.num_partitions());
  const PartitionCosts costs = partition_costs(profile, plan);
  Table5Prediction row;
  row.paper = paper;
  row.batch_size = profile.batch_size;
  row.device = profile.device;
  row.register_bytes = costs.output_bytes[0];
  for (int k = 0; k < 2; ++k) row.partition_ms.push_back(1e3 * (costs.forward_seconds[k] + costs.backward_seconds[k]));
  SimulateOptions options;
  options.batch_size = profile.batch_size;
  const double alone =
      simulate(schedule::make_schedule(schedule::ScheduleKind::kSequential, 1, 0, kSteps), one_device(costs), options)
          .steady_step_seconds;
  row.non_pipelined_step_ms = 1e3 * alone;
  const auto stale = schedule::make_schedule(schedule::ScheduleKind::kStale, 2, 0, kSteps);
  for (const auto& link : links) {
    options.link = link;
    const double step = simulate(stale, costs, options).steady_step_seconds;
    row.links.push_back({link, 1e3 * link.message_seconds(row.register_bytes), 1e3 * step, step > 0 ? alone / step : 0});
  }
  for (size_t k = 0; k < profile.partitions.size() && k < 2; ++k) {
    const auto& t = profile.partitions[k];
    const double measured = t.forward_ms + t.backward_ms;
    row.model_vs_measured.push_back(measured > 0 ? row.partition_ms[k] / measured : 0);
  }
  return row;
}

std::string format_table5(const std::vector<Table5Prediction>& rows) {
  if (rows.empty()) return "no rows\n";
  std::string devices = rows.front().device;
  for (const auto& r : rows) {
    if (r.device != rows.front().device) devices = "several devices";
  }
  std::string out = c10::str("2-GPU speedup over one device, predicted from profiles taken on ", devices,
                             " (stale schedule, ", kSteps, " steps, steady state), beside the paper's Table 5\n");
  char cell[128];
  std::snprintf(cell, sizeof cell, "%-16s %5s %17s %7s %8s %7s", "network (PPV)", "batch", "F+B ms (1 / 2)",
                "reg MB", "1-dev ms", "paper");
  out += cell;
  for (const auto& l : rows.front().links) {
    std::snprintf(cell, sizeof cell, " %8s", l.link.name.c_str());
    out += cell;
  }
  out += "  model/measured (1 / 2)\n";
  for (const auto& r : rows) {
    std::snprintf(cell, sizeof cell, "%-16s %5lld %8.2f /%7.2f %7.2f %8.2f %6.2fx", c10::str(r.paper.model, " (", r.paper.ppv, ")").c_str(),
                  static_cast<long long>(r.batch_size), r.partition_ms[0], r.partition_ms[1], r.register_bytes / 1e6,
                  r.non_pipelined_step_ms, r.paper.pipelined_speedup);
    out += cell;
    for (const auto& l : r.links) {
      std::snprintf(cell, sizeof cell, " %7.2fx", l.speedup);
      out += cell;
    }
    if (r.model_vs_measured.size() == 2) {
      std::snprintf(cell, sizeof cell, "  %.3f / %.3f", r.model_vs_measured[0], r.model_vs_measured[1]);
      out += cell;
    } else {
      out += "  not measured";
    }
    out += "\n";
  }
  out += c10::str("links (one direction; a message takes latency + bytes / bandwidth; the register of ", rows.front().paper.model, " takes):\n");
  for (size_t i = 0; i < rows.front().links.size(); ++i) {
    out += c10::str("  ", rows.front().links[i].link.describe(), ": ", rows.front().links[i].message_ms, " ms\n");
  }
  return out;
}

}  // namespace stalepipe::sim
