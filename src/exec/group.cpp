#include "stalepipe/exec/group.h"

#include "replicas_impl.h"
#include "stalepipe/exec/checkpoint.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {
namespace {

class LocalGroup : public Group {
 public:
  bool owns(int) const override { return true; }
  int replica() const override { return 0; }
  bool leader() const override { return true; }
  void share_from_last(std::vector<double>&) override {}
  void copy_first_replica(const std::vector<Pipeline*>& pipelines) override {
    for (size_t r = 1; r < pipelines.size(); ++r) {
      for (int k = 0; k < pipelines[0]->num_stages(); ++k) {
        load_stage_state(pipelines[r]->stage(k), stage_state(pipelines[0]->stage(k)));
      }
    }
  }
  void barrier() override {}
  void gather_partitions(std::vector<int64_t>&) override {}
  std::vector<int64_t> gather_processes(int64_t value) override { return {value}; }
  std::pair<torch::Tensor, torch::Tensor> predict(Pipeline& pipeline, const torch::Tensor& x,
                                                  const torch::Tensor& target, int64_t) override {
    torch::Tensor out = pipeline.predict(x);
    return {out, target.to(out.device())};
  }
};

// Rank r x K + k runs partition k + 1 of replica r + 1 (0-based: k of r).
class RankGroup : public Group {
 public:
  explicit RankGroup(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  bool owns(int partition) const override { return partition == group_->partition(); }
  int replica() const override { return group_->replica(); }
  bool leader() const override { return group_->rank() == 0; }
  void share_from_last(std::vector<double>& values) override {
    auto t = torch::tensor(values, torch::kDouble);
    group_->broadcast(t, group_->partitions() - 1);
    for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  }
  void copy_first_replica(const std::vector<Pipeline*>& pipelines) override {
    if (group_->replicas() > 1) detail::share_stage_state(*group_, pipelines.at(0)->stage(group_->partition()));
  }
  void barrier() override { group_->barrier(); }
  // One broadcast per partition, from replica 0: the few values of a checkpoint, not worth a
  // Gloo allgather's setup.
  void gather_partitions(std::vector<int64_t>& values) override {
    const size_t n = values.size() / static_cast<size_t>(group_->partitions());
    for (int r = 0; r < group_->partitions(); ++r) {
      auto slice = torch::from_blob(values.data() + r * n, {static_cast<int64_t>(n)}, torch::kLong).clone();
      group_->broadcast(slice, r);
      for (size_t i = 0; i < n; ++i) values[r * n + i] = slice[static_cast<int64_t>(i)].item<int64_t>();
    }
  }
  std::vector<int64_t> gather_processes(int64_t value) override {
    std::vector<int64_t> all;
    for (int r = 0; r < group_->size(); ++r) {
      auto t = torch::tensor({value}, torch::kLong);
      group_->broadcast(t, r);
      all.push_back(t.item<int64_t>());
    }
    return all;
  }
  std::pair<torch::Tensor, torch::Tensor> predict(Pipeline& pipeline, const torch::Tensor& x,
                                                  const torch::Tensor& target,
                                                  int64_t index) override {
    auto out = predict_distributed(*group_, pipeline.stages(), x, target, index);
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
