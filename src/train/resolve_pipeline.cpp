#include "resolve_pipeline.h"

#include <algorithm>

#include "stalepipe/common/error.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::train {

std::string resolve_pipeline(const TrainOptions& o, const models::InputShape& input) {
  if (o.partitions() == 0) return o.pipeline();
  SP_CHECK_ARG(o.partitions() >= 1, "--partitions must be >= 1, got ", o.partitions());
  const auto given = partition::parse_ppv(o.pipeline());
  if (!given.empty()) {
    SP_CHECK_ARG(static_cast<int>(given.size()) == o.partitions() - 1, "--partitions ",
                 o.partitions(), " and --pipeline ", o.pipeline(),
                 " disagree; give only one of them");
    return o.pipeline();  // resolved before (config.json of a balanced run)
  }
  models::Model model = models::make_model(o.model(), input);
  partition::Profile profile;
  if (o.balance() == "time") {
    partition::ProfileOptions p;
    p.batch_size = o.batch_size();
    p.threads = std::max(1, o.threads_per_worker());
    p.warmup = 1;
    p.repeats = 3;
    profile = partition::profile_model(model, p);
  }
  const auto costs = partition::unit_costs(model, o.balance(), &profile);
  return partition::format_ppv(partition::balance(model, costs, o.partitions()));
}

}  // namespace stalepipe::train
