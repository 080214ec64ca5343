// Balanced partitioning: the PPV that minimises the cost of the most expensive partition.
//
// In a pipeline the steady state moves at the pace of its slowest partition, so for K
// partitions we choose, among the register positions the model allows (Model::cut_layers()),
// the K-1 that minimise max_k cost(partition k), where a partition's cost is the sum of its
// units' costs. Exact (dynamic programming over the allowed cut points); among optimal
// PPVs the lexicographically smallest one (earliest cuts) is returned, so the result is
// deterministic.
#pragma once

#include <string>
#include <vector>

namespace stalepipe::models {
class Model;
}

namespace stalepipe::partition {

struct Profile;

// unit_cost: one non-negative cost per unit of `model` (model.units.size() entries).
// Returns the PPV (K-1 increasing weight-layer indices; empty for K = 1). Throws UsageError if
// the costs do not match the units, partitions < 1, or partitions exceeds the number of
// register positions + 1, e.g.
//   "model lenet5 allows at most 5 partitions (4 register positions), asked for 7".
std::vector<int> balance(const models::Model& model, const std::vector<double>& unit_cost,
                         int partitions);

// The largest partition cost of `ppv` under unit_cost (the quantity balance() minimises).
double max_partition_cost(const models::Model& model, const std::vector<double>& unit_cost,
                          const std::vector<int>& ppv);

// What a partition's cost is:
//   kTime   - forward + backward ms from a profile of this model;
//   kParams - trainable parameters (deterministic);
//   kFlops  - forward MFLOPs per sample (models::describe_units; backward is about twice
//             the forward for every unit, so the ratio between units is the same).
enum class Balance { kTime, kParams, kFlops };
// "time" | "params" | "flops"; UsageError naming `field` otherwise.
Balance balance_from_name(const std::string& name,
                          const std::string& field = "balance");
std::string to_string(Balance criterion);

// Per-unit costs by criterion. kTime needs `profile` (non-null, one row per unit); throws
// UsageError otherwise. `model` is not const because describe_units runs a forward. The first
// recompute_units units (Plan::recompute_units) cost one forward more under kTime and kFlops.
std::vector<double> unit_costs(models::Model& model, Balance criterion,
                               const Profile* profile = nullptr, size_t recompute_units = 0);

}  // namespace stalepipe::partition
