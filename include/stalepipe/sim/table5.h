// The paper's 2-GPU measurements (its Table 5: ResNet-56/110/224/362 on CIFAR-10, one
// partition per GPU) and stalepipe's prediction of them from profiles taken on one device.
//
// Prediction per network and link: the non-pipelined step is one device running every unit's
// forward and backward (the sequential schedule on one partition); the pipelined step is the
// stale schedule on the paper's 2 partitions with one device each, messages over the link
// (link.h, simulate.h). Speedup = non-pipelined step / pipelined steady step. Updates, data
// loading and evaluation are not in the profile, so they are left out of both sides.
#pragma once

#include <string>
#include <vector>

#include "stalepipe/sim/link.h"

namespace stalepipe::partition {
struct Profile;
struct Plan;
}  // namespace stalepipe::partition

namespace stalepipe::sim {

struct PaperTable5Row {
  std::string model;                // "resnet56"
  int ppv = 0;                      // the register's weight layer: 2n+1 for ResNet-(6n+2)
  double pipelined_speedup = 0;     // measured by the paper, over non-pipelined training
  double hybrid_speedup = 0;        // about half of the run pipelined
};

// ResNet-56, 110, 224, 362 in that order.
const std::vector<PaperTable5Row>& paper_table5();

struct LinkSpeedup {
  LinkModel link;
  double message_ms = 0;        // one register message of a whole mini-batch
  double step_ms = 0;           // the pipelined steady step
  double speedup = 0;           // non-pipelined step / step_ms
};

struct Table5Prediction {
  PaperTable5Row paper;
  int64_t batch_size = 0;
  std::string device;                // where the profile was taken
  std::vector<double> partition_ms;  // forward + backward of each partition
  int64_t register_bytes = 0;        // partition 1's output per mini-batch
  double non_pipelined_step_ms = 0;
  std::vector<LinkSpeedup> links;    // in the order given
  // Sum of the units' times / the partition measured as a block, per partition, when the
  // profile carries measure_partitions' times (profile.h); empty otherwise.
  std::vector<double> model_vs_measured;
};

// Predicts one row from a profile of paper.model and the plan of its PPV. Throws UsageError
// if the profile is of another model or the plan does not have 2 partitions.
Table5Prediction predict_table5_row(const partition::Profile& profile, const partition::Plan& plan,
                                    const PaperTable5Row& paper, const std::vector<LinkModel>& links);

// A table: network (PPV), batch, partitions' F+B ms, register MB, the paper's speedup, the
// predicted speedup per link, and the compute model's check where measured; then the links'
// assumptions. Ends with a newline.
std::string format_table5(const std::vector<Table5Prediction>& rows);

}  // namespace stalepipe::sim
