#include "stalepipe/exec/group.h"

#include "stalepipe/exec/pipeline.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {
namespace {

class LocalGroup : public Group {
 public:
  bool owns(int) const override { return true; }
  bool leader() const override { return true; }
  void share_from_last(std::vector<double>&) override {}
  void barrier() override {}
  std::pair<torch::Tensor, torch::Tensor> predict(Pipeline& pipeline, const torch::Tensor& x,
                                                  const torch::Tensor& target, int64_t) override {
    torch::Tensor out = pipeline.predict(x);
    return {out, target.to(out.device())};
  }
};

// Rank r runs partition r + 1 (0-based: r).
class RankGroup : public Group {
 public:
  explicit RankGroup(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  bool owns(int partition) const override { return partition == group_->rank(); }
  bool leader() const override { return group_->rank() == 0; }
  void share_from_last(std::vector<double>& values) override {
    auto t = torch::tensor(values, torch::kDouble);
    group_->broadcast(t, group_->size() - 1);
    for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  }
  void barrier() override { group_->barrier(); }
  std::pair<torch::Tensor, torch::Tensor> predict(Pipeline& pipeline, const torch::Tensor& x,
                                                  const torch::Tensor& target,
                                                  int64_t index) override {
    auto out = predict_distributed(*group_, pipeline.stage(group_->rank()), x, target, index);
    if (out.output.defined()) out.target = out.target.to(out.output.device());
    return {out.output, out.target};
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace

std::unique_ptr<Group> make_local_group() { return std::make_unique<LocalGroup>(); }

std::unique_ptr<Group> make_rank_group(std::shared_ptr<ProcessGroup> group) {
  return std::make_unique<RankGroup>(std::move(group));
}

}  // namespace stalepipe::exec
