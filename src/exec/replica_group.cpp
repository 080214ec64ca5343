// The processes executor's replicas: the group of each partition's R ranks (gradient sums,
// batch-norm statistics, the state a resumed run starts from) and the messages that keep R
// pipelines in step (where to stop, the loss of each mini-batch).
#include <algorithm>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "process_group_impl.h"
#include "replicas_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/checkpoint.h"

namespace stalepipe::exec {

namespace {

// Tags above those of the pipeline's messages and evaluation (processes.cpp,
// distributed_predict.cpp): per mini-batch one for replica 0's word on stopping, one for each
// replica's loss (two tags a message).
constexpr int kStopTags = 3 << 28;
constexpr int kLossTags = kStopTags + (1 << 26);
constexpr const char* kSumming = "sum gradients with the other replicas";  // what a rank waits to do
int control_tag(int base, int64_t step) { return base + static_cast<int>(step % (1 << 24)) * 2; }

}  // namespace

void ProcessGroup::connect_replicas(const std::string& where) {
  const int k = partition();
  try {
    impl_->replica_group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(c10::str("replicas-", k), impl_->store), replica(), replicas_,
        impl_->gloo_options);
  } catch (const std::exception& e) {
    throw RuntimeError(c10::str(describe(rank_, partitions(), replicas_), ": cannot connect the ", replicas_,
                                " replicas of partition ", k + 1, " (rendezvous ", where, "): ", e.what()));
  }
}

int ProcessGroup::other_replica() const {
  return replicas_ == 2 ? (1 - replica()) * partitions() + partition() : -1;
}

std::unique_ptr<ProcessGroup::PendingGather> ProcessGroup::gather_replicas(const torch::Tensor& tensor) {
  auto g = std::make_unique<PendingGather>();
  g->input = {tensor.contiguous()};
  g->outputs.resize(1);
  for (int r = 0; r < replicas_; ++r) g->outputs[0].push_back(torch::empty_like(g->input[0]));
  try {
    g->work = impl_->replica_group->allgather(g->outputs, g->input);
  } catch (const std::exception& e) {
    fail(other_replica(), kSumming, e);
  }
  return g;
}

// Waited for in slices: a replica that failed and waits for the others to read the store
// (rank 0 serves it, and stays a moment: processes.cpp) keeps its connections open, so between
// slices the store says whether one of them failed, before rank 0 and the store are gone.
std::vector<torch::Tensor> ProcessGroup::finish_gather(PendingGather& gather) {
  const WaitWatch::Scope waiting(impl_->watch.get(), other_replica());
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    try {
      if (!gather.work->wait(std::chrono::milliseconds(250))) throw std::runtime_error("the gather was aborted");
      return std::move(gather.outputs[0]);
    } catch (const std::exception& e) {
      const bool slice_over = one_line_message(e).find("timed out") != std::string::npos;
      if (!slice_over || std::chrono::steady_clock::now() >= deadline) fail(other_replica(), kSumming, e);
      const int failed = impl_->watch->failed_replica(rank_, partitions(), replicas_);
      if (failed >= 0) fail(failed, kSumming, std::runtime_error(c10::str(describe(failed, partitions(), replicas_), " failed")));
    }
  }
}

void ProcessGroup::broadcast_from_first_replica(torch::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor.is_contiguous() ? tensor : tensor.contiguous()};
  c10d::BroadcastOptions options;
  options.rootRank = 0;
  try {
    if (!impl_->replica_group->broadcast(tensors, options)->wait(timeout_)) {
      throw std::runtime_error("the broadcast was aborted");
    }
  } catch (const std::exception& e) {
    fail(other_replica(), "share replica 1's state", e);
  }
  if (!tensor.is_same(tensors[0])) tensor.copy_(tensors[0]);
}

namespace detail {
namespace {

// The gradient sums overlap the backward on a CPU stage: a hook on each parameter keeps the
// gradient the last backward of a step computes for it (where no earlier micro-batch left one
// to add it to), and once a bucket's parameters all have theirs (and every earlier bucket has
// started), its gather starts while autograd goes on with the earlier layers. The autograd
// engine sums every contribution to a parameter before its hook runs, so each hook runs at
// most once per backward; a parameter that gets no gradient leaves its bucket to be started
// after the backward, from the parameters' grad.
// Buckets start in the same order on every replica (Gloo matches collectives by order).
class GroupReplicaPeers final : public ReplicaPeers {
 public:
  GroupReplicaPeers(ProcessGroup& group, Stage& stage)
      : group_(group), params_(stage.optimizer().params()), buckets_(params_), bucket_of_(params_.size()),
        hooked_(params_.size()) {
    if (!stage.device().is_cpu()) return;  // a GPU's gradients are not ready when its hooks run
    for (size_t b = 0; b < buckets_.size(); ++b) {
      for (size_t i : buckets_.bucket(b)) bucket_of_[i] = b;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      hooks_.push_back(params_[i].register_hook([this, i](const torch::Tensor& g) { arrived(i, g); }));
    }
  }
  ~GroupReplicaPeers() override {
    for (size_t i = 0; i < hooks_.size(); ++i) params_[i].remove_hook(hooks_[i]);
    if (group_.failed()) {  // abandoned with the group (processes.h): their errors stay
      for (auto& gather : gathers_) (void)gather.release();
    }
  }

  void backward_begins(bool last) override {
    collecting_ = last && !hooks_.empty();
    if (!collecting_) return;
    missing_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b) missing_.push_back(buckets_.bucket(b).size());
    std::fill(hooked_.begin(), hooked_.end(), torch::Tensor());
  }

  void reduce_gradients() override {
    collecting_ = false;
    while (gathers_.size() < buckets_.size()) gathers_.push_back(group_.gather_replicas(buckets_.pack(gathers_.size())));
    for (size_t b = 0; b < buckets_.size(); ++b) buckets_.unpack(b, sum_in_order(group_.finish_gather(*gathers_[b])));
    gathers_.clear();
  }

  std::optional<StepLoss> combine_loss(const StepLoss& loss) override {
    const int last = group_.partitions() - 1;
    const int tag = control_tag(kLossTags, loss.step);
    if (group_.replica() > 0) {
      const torch::Tensor values = torch::tensor({loss.loss, static_cast<double>(loss.correct),
                                                  static_cast<double>(loss.scored), static_cast<double>(loss.samples)},
                                                 torch::kDouble);
      group_.send_tensor(values, last, tag, loss.step);
      return std::nullopt;
    }
    std::vector<StepLoss> slices{loss};
    for (int r = 1; r < group_.replicas(); ++r) {
      const torch::Tensor v = group_.recv_tensor(r * group_.partitions() + last, tag).tensor;
      const double* at = v.data_ptr<double>();
      StepLoss s;
      s.step = loss.step;
      s.loss = at[0];
      s.correct = static_cast<int64_t>(at[1]);
      s.scored = static_cast<int64_t>(at[2]);
      s.samples = static_cast<int64_t>(at[3]);
      slices.push_back(s);
    }
    return combine_losses(slices);
  }

 private:
  void arrived(size_t i, const torch::Tensor& grad) {
    if (!collecting_) return;
    SP_CHECK(!hooked_[i].defined(), "replica gradient hook: parameter ", i, " got two gradients in one backward");
    // The hook sees this backward's part; where earlier micro-batches left a gradient, the sum
    // is the parameter's grad after the backward, and its bucket starts then.
    if (params_[i].grad().defined()) return;
    hooked_[i] = grad.detach();
    --missing_[bucket_of_[i]];
    // Start, in bucket order, every bucket that is whole.
    while (gathers_.size() < buckets_.size() && missing_[gathers_.size()] == 0) {
      gathers_.push_back(group_.gather_replicas(buckets_.pack(gathers_.size(), hooked_)));
    }
  }

  ProcessGroup& group_;
  std::vector<torch::Tensor> params_;
  GradientBuckets buckets_;
  std::vector<unsigned> hooks_;
  std::vector<size_t> bucket_of_;      // [parameter]: its bucket
  bool collecting_ = false;
  std::vector<size_t> missing_;        // per bucket: parameters whose gradient is still to come
  std::vector<torch::Tensor> hooked_;  // per parameter: its gradient from the hook
  std::vector<std::unique_ptr<ProcessGroup::PendingGather>> gathers_;  // started, in bucket order
};

}  // namespace

std::unique_ptr<ReplicaPeers> make_group_peers(ProcessGroup& group, Stage& stage) {
  return std::make_unique<GroupReplicaPeers>(group, stage);
}

// Replica 0's first rank alone reads the stop flag, and tells the other replicas' first ranks
// before each mini-batch whether it enters: all R pipelines stop at the same step.
SegmentContext agreed_input(ProcessGroup& group, const SegmentContext& context) {
  SegmentContext c = context;
  c.stop = nullptr;
  c.input = [&group, &context](int64_t step) {
    const int K = group.partitions();
    const int tag = control_tag(kStopTags, step);
    bool stop = false;
    if (group.replica() == 0) {
      stop = context.stop && context.stop->load();
      for (int r = 1; r < group.replicas(); ++r) group.send_tensor({}, r * K, tag, step, stop);
    } else {
      stop = group.recv_tensor(0, tag).stop;
    }
    return stop ? Input{} : context.input(step);
  };
  return c;
}

void broadcast_buffers(ProcessGroup& group, Stage& stage) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor b : stage.module()->buffers()) group.broadcast_from_first_replica(b);
}

void share_stage_state(ProcessGroup& group, Stage& stage) {
  const bool first = group.replica() == 0;
  const std::string bytes = first ? stage_state(stage) : std::string();
  torch::Tensor size = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong);
  group.broadcast_from_first_replica(size);
  torch::Tensor data = first ? torch::from_blob(const_cast<char*>(bytes.data()), {size.item<int64_t>()}, torch::kUInt8).clone()
                             : torch::empty({size.item<int64_t>()}, torch::kUInt8);
  group.broadcast_from_first_replica(data);
  if (first) return;
  // Read from a copy LibTorch makes on this thread: a Gloo thread wrote `data`, and the wait
  // that orders it before this read is inside LibTorch, where ThreadSanitizer cannot see it.
  const torch::Tensor mine = data.clone();
  load_stage_state(stage, std::string(static_cast<const char*>(mine.data_ptr()), mine.numel()));
}

}  // namespace detail
}  // namespace stalepipe::exec
