// Evaluation through the ranks of the processes executor (exec/processes.h,
// predict_distributed): each batch's activation goes rank by rank, its target straight to the
// last rank, and each skip tensor straight from the rank that stashes it to the one that pops it.
#include <map>

#include "links_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {
namespace {

// Evaluation batches use a range of tags of their own from 2^29 (beyond the pipeline's): a block
// per batch of two tags (header, payload) for the activation, the target, then each skip tensor.
constexpr int kEvalActivation = 0, kEvalTarget = 2, kEvalSkips = 4, kMaxEvalTagsPerIndex = 512;

// Where each skip tensor goes in an evaluation pass, and its tag slot.
struct EvalSkip {
  int source = 0, destination = 0, slot = 0;
};

struct EvalTags {
  std::map<std::string, EvalSkip> skips;
  int per_index = kEvalSkips;
  // Batches 2^19 apart share tags (far more than are ever in flight), so that the range ends
  // below the replicas' tags (replica_group.cpp), at 2^29 + 2^19 * 512.
  int tag(int64_t index, int slot) const { return (1 << 29) + static_cast<int>((index % (1 << 19)) * per_index + slot); }
};

EvalTags eval_tags(const detail::Wiring& wiring) {
  EvalTags tags;
  for (const auto& route : wiring.routes()) {
    if (route.lane != detail::Lane::kActivation) continue;
    for (const std::string& name : route.names) {
      if (name == detail::kActivation || name == detail::kTarget) continue;
      tags.skips[name] = {route.source, route.destination, tags.per_index};
      tags.per_index += 2;
    }
  }
  SP_CHECK(tags.per_index <= kMaxEvalTagsPerIndex, "processes executor: ", tags.skips.size(),
           " skip tensors cross registers; evaluation has tags for ", (kMaxEvalTagsPerIndex - kEvalSkips) / 2);
  return tags;
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
    const EvalTags tags = eval_tags(detail::Wiring::pipeline(stages));
    StageTensors x;
    x.main = r == 0 ? input : group.recv_tensor(first + r - 1, tags.tag(index, kEvalActivation)).tensor;
    for (const std::string& name : stage.skip_inputs()) {
      const EvalSkip& skip = tags.skips.at(name);
      x.skips.push_back(group.recv_tensor(first + skip.source, tags.tag(index, skip.slot)).tensor);
    }
    StageTensors y = stage.predict(x);
    for (size_t i = 0; i < y.skips.size(); ++i) {
      const EvalSkip& skip = tags.skips.at(stage.skip_outputs()[i]);
      group.send_tensor(y.skips[i], first + skip.destination, tags.tag(index, skip.slot), index);
    }
    if (r + 1 < K) {
      group.send_tensor(y.main, first + r + 1, tags.tag(index, kEvalActivation), index);
      if (r == 0) group.send_tensor(target, first + K - 1, tags.tag(index, kEvalTarget), index);
      return out;
    }
    out.output = y.main;
    out.target = r == 0 ? target : group.recv_tensor(first, tags.tag(index, kEvalTarget)).tensor;
  } catch (...) {
    group.mark_failed();
    throw;
  }
  return out;
}

}  // namespace stalepipe::exec
