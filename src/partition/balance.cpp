#include "stalepipe/partition/balance.h"

#include <algorithm>
#include <limits>

#include "stalepipe/common/error.h"
#include "stalepipe/common/names.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/model.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<int> balance(const models::Model& model, const std::vector<double>& unit_cost,
                         int partitions) {
  SP_CHECK_ARG(unit_cost.size() == model.units.size(), "balance: model ", model.name, " has ",
               model.units.size(), " units but ", unit_cost.size(), " costs were given");
  for (size_t u = 0; u < unit_cost.size(); ++u) {
    SP_CHECK_ARG(unit_cost[u] >= 0, "balance: unit ", u, " (", model.units[u].name,
                 ") has a negative cost ", unit_cost[u]);
  }
  const std::vector<int> layers = model.cut_layers();
  const int M = static_cast<int>(layers.size());
  SP_CHECK_ARG(partitions >= 1, "balance: partitions must be >= 1, got ", partitions);
  SP_CHECK_ARG(partitions <= M + 1, "model ", model.name, " allows at most ", M + 1,
               " partitions (", M, " register positions), asked for ", partitions);
  if (partitions == 1) return {};

  // Candidate j cuts right after unit end[j] - 1; the prefix sums give partition costs.
  const size_t U = model.units.size();
  std::vector<double> prefix(U + 1, 0.0);
  for (size_t u = 0; u < U; ++u) prefix[u + 1] = prefix[u] + unit_cost[u];
  std::vector<size_t> end(M);
  for (int j = 0; j < M; ++j) end[j] = static_cast<size_t>(model.unit_ending_at_layer(layers[j])) + 1;
  // Position M+1 stands for "the start" (units begin at 0) and M for "the end" (units end at U).
  auto begin_of = [&](int j) { return j < 0 ? size_t{0} : end[j]; };
  auto cost = [&](size_t first, size_t last) { return prefix[last] - prefix[first]; };

  // tail[r][j]: smallest largest cost of the units after cut j (j = -1: all units) split by r
  // more cuts chosen among the candidates after j. Stored at index j + 1.
  const int R = partitions - 1;
  std::vector<std::vector<double>> tail(R + 1, std::vector<double>(M + 1, kInf));
  for (int j = -1; j < M; ++j) tail[0][j + 1] = cost(begin_of(j), U);
  for (int r = 1; r <= R; ++r) {
    for (int j = -1; j < M; ++j) {
      double best = kInf;
      for (int c = j + 1; c < M; ++c) {
        best = std::min(best, std::max(cost(begin_of(j), end[c]), tail[r - 1][c + 1]));
      }
      tail[r][j + 1] = best;
    }
  }
  const double optimum = tail[R][0];
  // Earliest cuts first: at each point take the first candidate that still reaches the optimum.
  std::vector<int> ppv;
  int previous = -1;
  for (int r = R; r >= 1; --r) {
    int chosen = -1;
    for (int c = previous + 1; c < M; ++c) {
      if (cost(begin_of(previous), end[c]) <= optimum && tail[r - 1][c + 1] <= optimum) {
        chosen = c;
        break;
      }
    }
    SP_CHECK(chosen >= 0, "balance: internal error reconstructing the optimum");
    ppv.push_back(layers[chosen]);
    previous = chosen;
  }
  return ppv;
}

double max_partition_cost(const models::Model& model, const std::vector<double>& unit_cost,
                          const std::vector<int>& ppv) {
  const Plan plan = make_plan(model, ppv);
  double worst = 0;
  for (const auto& [first, last] : plan.unit_ranges) {
    double sum = 0;
    for (size_t u = first; u < last; ++u) sum += unit_cost.at(u);
    worst = std::max(worst, sum);
  }
  return worst;
}

namespace {
const std::pair<Balance, const char*> kBalanceNames[] = {
    {Balance::kTime, "time"}, {Balance::kParams, "params"}, {Balance::kFlops, "flops"}};
}  // namespace

Balance balance_from_name(const std::string& name, const std::string& field) {
  return value_of(kBalanceNames, name, field);
}

std::string to_string(Balance criterion) { return name_of(kBalanceNames, criterion); }

std::vector<double> unit_costs(models::Model& model, Balance criterion, const Profile* profile,
                               size_t recompute_units) {
  std::vector<double> costs;
  if (criterion == Balance::kTime) {
    SP_CHECK_ARG(profile != nullptr, "balance time needs a profile");
    SP_CHECK_ARG(profile->units.size() == model.units.size(), "balance time: the profile of ",
                 profile->model, " has ", profile->units.size(), " units but model ", model.name,
                 " has ", model.units.size());
    for (const auto& u : profile->units) {
      costs.push_back(u.forward_ms + u.backward_ms_with(static_cast<size_t>(u.index) < recompute_units));
    }
  } else if (criterion == Balance::kParams) {
    for (const auto& unit : model.units) {
      int64_t count = 0;
      for (const auto& p : unit.module.ptr()->parameters()) {
        if (p.requires_grad()) count += p.numel();
      }
      costs.push_back(static_cast<double>(count));
    }
  } else {
    // Backward is about twice the forward, so a recomputed unit costs 4 forwards, not 3.
    const auto rows = models::describe_units(model);
    for (size_t u = 0; u < rows.size(); ++u) {
      costs.push_back(rows[u].forward_mflops * (u < recompute_units ? 4.0 / 3.0 : 1.0));
    }
  }
  return costs;
}

}  // namespace stalepipe::partition
