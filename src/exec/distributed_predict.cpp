// Evaluation through the ranks of the processes executor (exec/processes.h,
// predict_distributed): each batch's activation goes rank by rank, its target straight to the
// last rank, and each skip tensor straight from the rank that stashes it to the one that pops it.
#include <map>

#include "links_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {
namespace {

// Evaluation batches use a range of tags of their own above 2^29 (beyond the pipeline's), a
// block of 64 per batch: the activation, the target, then the skip tensors.
constexpr int kEvalActivation = 0, kEvalTarget = 2, kEvalSkips = 4, kEvalTagsPerIndex = 64;
int eval_tag(int64_t index, int slot) {
  return (1 << 29) + static_cast<int>((index % (1 << 22)) * kEvalTagsPerIndex + slot);
}

// Where each skip tensor goes in an evaluation pass, and its tag slot.
struct EvalSkip {
  int source = 0, destination = 0, slot = 0;
};
std::map<std::string, EvalSkip> eval_skips(const detail::Wiring& wiring) {
  std::map<std::string, EvalSkip> skips;
  int slot = kEvalSkips;
  for (const auto& route : wiring.routes()) {
    if (route.lane != detail::Lane::kActivation) continue;
    for (const std::string& name : route.names) {
      if (name == detail::kActivation || name == detail::kTarget) continue;
      SP_CHECK(slot < kEvalTagsPerIndex, "processes executor: more than ", (kEvalTagsPerIndex - kEvalSkips) / 2,
               " skip tensors cross registers; evaluation has tags for no more");
      skips[name] = {route.source, route.destination, slot};
      slot += 2;
    }
  }
  return skips;
}

}  // namespace

DistributedPrediction predict_distributed(ProcessGroup& group, const std::vector<Stage*>& stages,
                                          const torch::Tensor& input, const torch::Tensor& target,
                                          int64_t index) {
  const int r = group.partition();
  const int K = group.partitions();
  const int first = group.rank() - r;  // its replica's partition 1
  DistributedPrediction out;
  try {
    Stage& stage = *stages.at(r);
    const auto skips = eval_skips(detail::Wiring::pipeline(stages));
    StageTensors x;
    x.main = r == 0 ? input : group.recv_tensor(first + r - 1, eval_tag(index, kEvalActivation)).tensor;
    for (const std::string& name : stage.skip_inputs()) {
      const EvalSkip& skip = skips.at(name);
      x.skips.push_back(group.recv_tensor(first + skip.source, eval_tag(index, skip.slot)).tensor);
    }
    StageTensors y = stage.predict(x);
    for (size_t i = 0; i < y.skips.size(); ++i) {
      const EvalSkip& skip = skips.at(stage.skip_outputs()[i]);
      group.send_tensor(y.skips[i], first + skip.destination, eval_tag(index, skip.slot), index);
    }
    if (r + 1 < K) {
      group.send_tensor(y.main, first + r + 1, eval_tag(index, kEvalActivation), index);
      if (r == 0) group.send_tensor(target, first + K - 1, eval_tag(index, kEvalTarget), index);
      return out;
    }
    out.output = y.main;
    out.target = r == 0 ? target : group.recv_tensor(first, eval_tag(index, kEvalTarget)).tensor;
  } catch (...) {
    group.mark_failed();
    throw;
  }
  return out;
}

}  // namespace stalepipe::exec
