// Data-parallel replicas of a pipeline (PipelineOptions::replicas): how a mini-batch is split
// between the R copies, how the copies of a partition sum their gradients before each update,
// and how the last partitions' losses of one mini-batch become one. Private to src/exec.
//
// Determinism: every sum runs over the replicas in replica order, elementwise, on tensors of
// the same layout, whoever computes it: the executors in this process add the copies' own
// tensors, the processes executor the copies an all-gather brought. So R x K threads and R x K
// ranks give the same bits, run after run (an all-reduce would let the ring's chunk order
// decide how three or more addends associate).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "stalepipe/common/channel.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/stage.h"
#include "worker_impl.h"

namespace stalepipe::exec {
class ProcessGroup;
}

namespace stalepipe::exec::detail {

// A stage's gradients as flat buckets: the parameters from the last to the first (the order
// backward produces them) cut into runs of at most kGradientBucketBytes of one dtype. A packed bucket
// holds each gradient (zeros where it is undefined) and then one flag per parameter (1 where
// it is defined), so that the sum also says which parameters any replica gave a gradient.
class GradientBuckets {
 public:
  explicit GradientBuckets(const std::vector<torch::Tensor>& params);
  size_t size() const { return buckets_.size(); }
  // The parameter indices of a bucket.
  const std::vector<size_t>& bucket(size_t b) const { return buckets_.at(b); }
  torch::Tensor pack(size_t bucket) const;
  // The same from gradients given per parameter index (a backward hook's, before they reach
  // the parameters' grad).
  torch::Tensor pack(size_t bucket, const std::vector<torch::Tensor>& grads) const;
  // Writes a sum of packs into the gradients, in their layout; a parameter whose flags sum to
  // 0 keeps no gradient (the optimizer skips it, as it would with one replica).
  void unpack(size_t bucket, const torch::Tensor& sum) const;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices
};

// parts[0] + parts[1] + ... + parts[R-1], in that order.
torch::Tensor sum_in_order(const std::vector<torch::Tensor>& parts);

// The loss of one mini-batch from its slices' losses (in replica order).
StepLoss combine_losses(const std::vector<StepLoss>& slices);

// The worker of partition k in replica r, towards the other replicas of its partition.
class ReplicaPeers {
 public:
  virtual ~ReplicaPeers() = default;
  // Before each backward; `last`: the backward whose end completes the step's
  // gradient (its last micro-batch), whose buckets may start their sums as they fill.
  virtual void backward_begins(bool /*last*/) {}
  // After the last backward of a step, before its update: on return the stage's gradients are
  // the sum over the replicas.
  virtual void reduce_gradients() = 0;
  // The last partition: the loss of this replica's slice of mini-batch loss.step. Returns the
  // whole mini-batch's loss on the one worker that reports it, nullopt on the others.
  virtual std::optional<StepLoss> combine_loss(const StepLoss& loss) = 0;
};

// R replicas of K partitions in this process: stages[r * K + k] is partition k of replica r.
// Replica 0's first worker reads each mini-batch (the segment's input and stop flag) and hands
// every replica its slice; the others read theirs from it. close() wakes every waiter, which
// then throws Cancelled (worker_impl.h).
class LocalReplicas {
 public:
  // blocking: reduce_gradients waits for every replica (threads); without it (emulated, which
  // runs the replicas' operations one after another) the executor calls reduce_partition
  // before the replicas' updates instead.
  LocalReplicas(std::vector<Stage*> stages, int partitions, const SegmentContext& context, bool blocking);
  ~LocalReplicas();
  // The context replica r's workers run with: its slice for input, no stop flag of its own.
  SegmentContext context_for(int replica) const;
  ReplicaPeers& peers(int replica, int partition);
  // Sums partition k's gradients over the replicas into each of them, ordered after the work
  // queued so far on every replica's stream, and orders each replica's later work after the
  // sum (the emulated executor, which runs every replica on its one thread).
  void reduce_partition(int partition);
  // Replica 0's batch-norm statistics (and every other buffer) into the other replicas.
  void copy_buffers();
  void close();

 private:
  class Peers;
  using Event = std::shared_ptr<const StreamEvent>;
  struct Meeting {  // the replicas of one partition waiting for their sum
    int arrived = 0;
    int64_t generation = 0;
    std::vector<Event> ready;  // [replica]: after the backward that wrote its gradients
    Event summed;              // after the sum was written into every replica's gradients
  };
  exec::Input next_slice(int replica, int64_t step);
  // Replica `replica` of `partition` has its gradients queued and waits for the others.
  void reduce_gradients(int partition, int replica);
  // The sum on replica `summer`'s stream, after each replica's `ready`; returns its event.
  Event sum_gradients(int partition, int summer, const std::vector<Event>& ready);
  std::optional<StepLoss> combine_loss(int replica, const StepLoss& loss);

  std::vector<Stage*> stages_;
  int partitions_, replicas_;
  const SegmentContext& context_;
  bool blocking_;
  std::vector<std::unique_ptr<Peers>> peers_;
  std::vector<std::unique_ptr<Channel<exec::Input>>> slices_;  // [replica], for replicas 1..R-1
  std::vector<GradientBuckets> buckets_;  // [r * K + k]
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Meeting> meetings_;  // [partition]
  bool closed_ = false;
  std::map<int64_t, std::vector<std::optional<StepLoss>>> losses_;  // step -> per replica
};

// The workers of the replicas in this process (R = stages / K, each over its own links):
// the LocalReplicas (with R > 1), each replica's context and the loops, replica after replica.
// Built in place: the loops hold references to the contexts and the replicas.
struct LocalWorkers {
  std::optional<LocalReplicas> replicas;
  std::vector<SegmentContext> contexts;  // [replica]
  std::vector<WorkerLoop> loops;         // [r * K + k]
};
void build_local_workers(LocalWorkers& out, const schedule::Schedule& schedule, const Wiring& wiring,
                         std::vector<Stage*>& stages, const std::vector<Links*>& links,
                         const SegmentContext& context, bool blocking);

// The processes executor's replicas (replica_group.cpp), over the group of each partition's R
// ranks.
std::unique_ptr<ReplicaPeers> make_group_peers(ProcessGroup& group, Stage& stage);
// The context of a rank of partition 1: whether each mini-batch enters is replica 0's call.
SegmentContext agreed_input(ProcessGroup& group, const SegmentContext& context);
// Replica 0's buffers (batch-norm statistics) into every replica of the stage's partition.
void broadcast_buffers(ProcessGroup& group, Stage& stage);
// Replica 0's whole state of the stage (weights, buffers, optimizer) into every replica.
void share_stage_state(ProcessGroup& group, Stage& stage);

// Throws RuntimeError unless the stages are R whole pipelines of schedule.num_workers
// partitions; returns R.
int replica_count(const schedule::Schedule& schedule, const std::vector<Stage*>& stages);

}  // namespace stalepipe::exec::detail
