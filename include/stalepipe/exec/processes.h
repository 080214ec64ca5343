// The processes executor: partition k runs in rank k-1 of a process group of K ranks, over
// c10d's TCPStore (rendezvous) and ProcessGroupGloo (point-to-point messages, CPU tensors).
//
// Every rank builds the same model and stages; rank r runs only worker r's operation list of
// the same schedule the other executors run, so the results equal the emulated executor's bit
// for bit on CPU. Rank 0 reads the data and feeds partition 1; the target travels with the
// activations rank by rank to the last partition.
//
// Replicas (PipelineOptions::replicas R): R x K ranks, rank r x K + k running partition k of
// replica r. Each replica's first rank reads its own slice of every mini-batch; the R ranks
// of a partition gather their gradients before each update and add them up in replica order
// (src/exec/replicas_impl.h: the same bits as R x K threads); replica 0's first rank decides
// where the segment stops and tells the others; the losses of a mini-batch's slices meet at
// replica 0's last rank. At a segment's end replica 0's buffers (batch-norm statistics) go to
// the others.
//
// Messages: each register value is a fixed-size int64 header (step, stop flag, dtype, shape)
// followed by the payload; tags carry the step, so matching never depends on arrival order.
// Sends are asynchronous (a send completes only once the peer posts its receive, so a blocking
// send could deadlock against the stale schedule); a rank waits for them at segment end.
//
// Failures: every wait is bounded by timeout_seconds. A peer that closed its connection (died)
// or did not answer in time becomes RuntimeError "rank 2 (partition 3) did not answer within
// 60 s: ..." naming the peer; the error ends the rank's run (the CLI exits), and its own peers
// see it disappear. The first loss any rank saw (a peer gone, or the silent rank behind a
// timeout) is recorded in the store, so every rank's message starts with the rank that failed
// first ("rank 1 (partition 2) failed first; ..."), not a neighbour that went down in the
// cascade.
// Threading: a ProcessGroup is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/arg.h>
#include <torch/types.h>

#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/group.h"
#include "stalepipe/exec/process_group_options.h"

namespace stalepipe::exec {

class ProcessGroup {
 public:
  // Rendezvous: rank 0 serves the TCPStore on master_addr:master_port; every rank writes its
  // config_hash and waits up to timeout_seconds for all ranks, then compares with rank 0's.
  // Throws RuntimeError for a port in use, an unreachable master, missing ranks (named) or a
  // configuration mismatch (both hashes named).
  // replicas: R copies of the pipeline (PipelineOptions::replicas); rank r x K + k runs
  // partition k of replica r (K = world size / R, UsageError if R does not divide it), and the
  // R ranks of each partition form a group of their own for their gradient sums.
  ProcessGroup(const ProcessGroupOptions& options, const std::string& config_hash, int replicas = 1);
  // A group that failed is abandoned, not torn down: Gloo's destructor may wait for peers
  // that are gone.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int replicas() const { return replicas_; }
  int partitions() const { return size_ / replicas_; }  // of one replica
  int replica() const { return rank_ / partitions(); }
  int partition() const { return rank_ % partitions(); }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Asynchronous send of a contiguous CPU copy of `tensor` to rank `dst` under `tag`.
  void send(const torch::Tensor& tensor, int dst, int tag);
  // Blocking receive into `tensor` (contiguous CPU) from rank `src` under `tag`.
  void recv(torch::Tensor& tensor, int src, int tag);
  // A tensor of any dtype and shape: header then payload (two tags: tag, tag + 1).
  void send_tensor(const torch::Tensor& tensor, int dst, int tag, int64_t step, bool stop = false,
                   int64_t aux = 0);
  // Returns {step, stop, tensor, aux} (tensor undefined when the sender sent an undefined one;
  // aux: a number the sender attached).
  struct Received {
    int64_t step = 0;
    bool stop = false;
    int64_t aux = 0;
    torch::Tensor tensor;
  };
  Received recv_tensor(int src, int tag);
  // Waits for every send still in flight.
  void flush();
  // Gives `tensor` (same shape and dtype on every rank, CPU) rank `root`'s value.
  void broadcast(torch::Tensor& tensor, int root);
  void barrier();
  // The replicas of this rank's partition (replica order). gather_replicas starts giving
  // every one of them all their `tensor`s (same shape and dtype, CPU); finish_gather waits and
  // returns them in replica order. Several gathers may be in flight; finish them in order.
  struct PendingGather;
  std::unique_ptr<PendingGather> gather_replicas(const torch::Tensor& tensor);
  std::vector<torch::Tensor> finish_gather(PendingGather& gather);
  // Gives `tensor` (CPU) replica 0's value in every replica of this rank's partition.
  void broadcast_from_first_replica(torch::Tensor& tensor);
  // Marks the group failed (see the destructor).
  void mark_failed() { failed_ = true; }
  bool failed() const { return failed_; }

 private:
  [[noreturn]] void fail(int peer, const std::string& what, const std::exception& e);
  void fail_if_a_send_failed();
  std::string first_loss(int lost);
  // The constructor's steps: the TCPStore, the configuration check, the Gloo group.
  void connect_store(const ProcessGroupOptions& o, const std::string& where);
  void compare_configs(const std::string& config_hash, const std::string& where, int timeout_seconds);
  void connect_gloo(const ProcessGroupOptions& o, const std::string& where);
  void connect_replicas(const std::string& where);
  // The rank a failed collective of the replica group waited for: the other one of two, else
  // unknown (-1).
  int other_replica() const;
  // The rank a failed collective of all ranks waited for: the other one of two, else any.
  int collective_peer() const;

  int rank_ = 0, size_ = 1, replicas_ = 1;
  std::chrono::milliseconds timeout_{60000};
  struct Impl;  // the c10d objects; keeps Gloo's headers out of this one
  std::unique_ptr<Impl> impl_;
  bool failed_ = false;
};

// The processes executor in the process of rank group->rank(): run() runs worker rank's
// operations on stages[rank]; the other stages stay untouched.
std::unique_ptr<Executor> make_processes_executor(std::shared_ptr<ProcessGroup> group);

// The training loop's view of the group (exec/group.h): rank r owns partition r.
std::unique_ptr<Group> make_rank_group(std::shared_ptr<ProcessGroup> group);

// Evaluation forward through the pipeline ranks: rank 0 passes the input batch and its target,
// the other ranks undefined tensors. The last rank gets the output (eval mode, no graph) and
// the target (sent straight from rank 0); the others get undefined tensors. Skip tensors go
// straight from the rank that stashes them to the one that pops them. `index` numbers the
// batches of one pass (it goes into the message tags). stages: all partitions (rank r runs
// stages[r]; the others give the skip tensors' routes).
struct DistributedPrediction {
  torch::Tensor output;
  torch::Tensor target;
};
DistributedPrediction predict_distributed(ProcessGroup& group, const std::vector<Stage*>& stages,
                                          const torch::Tensor& input, const torch::Tensor& target,
                                          int64_t index);

}  // namespace stalepipe::exec
