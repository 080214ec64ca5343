#include "replicas_impl.h"

#include <limits>

#include "stalepipe/common/error.h"
#include "stalepipe/common/slices.h"
#include "worker_impl.h"

namespace stalepipe::exec::detail {

GradientBuckets::GradientBuckets(const std::vector<torch::Tensor>& params) : params_(params) {
  int64_t bytes = 0;
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& p = params_[i];
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    const bool fits = !buckets_.empty() && bytes + size <= kGradientBucketBytes &&
                      params_[buckets_.back().front()].scalar_type() == p.scalar_type();
    if (!fits) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(i);
    bytes += size;
  }
}

torch::Tensor GradientBuckets::pack(size_t bucket) const {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params_) grads.push_back(p.grad());
  return pack(bucket, grads);
}

torch::Tensor GradientBuckets::pack(size_t bucket, const std::vector<torch::Tensor>& grads) const {
  const std::vector<size_t>& ids = buckets_.at(bucket);
  std::vector<torch::Tensor> flat;
  std::vector<double> flags;
  for (size_t i : ids) {
    const torch::Tensor& g = grads[i];
    flags.push_back(g.defined() ? 1.0 : 0.0);
    // reshape, not view: a channels-last gradient is flattened in logical (NCHW) order.
    flat.push_back(g.defined() ? g.detach().reshape({-1}) : torch::zeros({params_[i].numel()}, params_[i].options()));
  }
  flat.push_back(torch::tensor(flags, params_[ids.front()].options()));
  return torch::cat(flat);
}

void GradientBuckets::unpack(size_t bucket, const torch::Tensor& sum) const {
  torch::NoGradGuard no_grad;
  const std::vector<size_t>& ids = buckets_.at(bucket);
  const int64_t n = static_cast<int64_t>(ids.size());
  const torch::Tensor flags = sum.narrow(0, sum.size(0) - n, n).to(torch::kDouble).cpu().contiguous();
  const double* defined = flags.data_ptr<double>();
  int64_t offset = 0;
  for (int64_t j = 0; j < n; ++j) {
    torch::Tensor p = params_[ids[j]];
    const torch::Tensor value = sum.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
    torch::Tensor& g = p.mutable_grad();
    if (defined[j] == 0) {
      g = torch::Tensor();
    } else if (g.defined()) {
      g.copy_(value);
    } else {
      g = torch::empty_like(p).copy_(value);
    }
  }
}

torch::Tensor sum_in_order(const std::vector<torch::Tensor>& parts) {
  SP_CHECK(!parts.empty(), "sum over no replicas");
  torch::Tensor sum = parts[0].clone();
  for (size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r]);
  return sum;
}

StepLoss combine_losses(const std::vector<StepLoss>& slices) {
  StepLoss total;
  double loss_sum = 0;
  for (const StepLoss& s : slices) {
    total.step = s.step;
    loss_sum += s.loss * static_cast<double>(s.samples);
    total.correct += s.correct;
    total.scored += s.scored;
    total.samples += s.samples;
  }
  total.loss = total.samples > 0 ? loss_sum / static_cast<double>(total.samples) : 0;
  return total;
}

void build_local_workers(LocalWorkers& out, const schedule::Schedule& schedule, const Wiring& wiring,
                         std::vector<Stage*>& stages, const std::vector<Links*>& links,
                         const SegmentContext& context, bool blocking) {
  const int K = schedule.num_workers;
  const int R = static_cast<int>(links.size());
  if (R > 1) out.replicas.emplace(stages, K, context, blocking);
  for (int r = 0; r < R; ++r) out.contexts.push_back(out.replicas ? out.replicas->context_for(r) : context);
  out.loops.reserve(stages.size());
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) {
      out.loops.emplace_back(WorkerLoopOptions()
                                 .schedule(&schedule)
                                 .wiring(&wiring)
                                 .worker(k)
                                 .stage(stages[r * K + k])
                                 .links(links[r])
                                 .context(&out.contexts[r])
                                 .peers(out.replicas ? &out.replicas->peers(r, k) : nullptr));
    }
  }
}

int replica_count(const schedule::Schedule& schedule, const std::vector<Stage*>& stages) {
  const int K = schedule.num_workers;
  SP_CHECK(K > 0 && !stages.empty() && stages.size() % static_cast<size_t>(K) == 0, "schedule has ", K,
           " workers but there are ", stages.size(), " partitions (replicas must be whole pipelines)");
  return static_cast<int>(stages.size()) / K;
}

class LocalReplicas::Peers final : public ReplicaPeers {
 public:
  Peers(LocalReplicas& all, int replica, int partition) : all_(all), replica_(replica), partition_(partition) {}
  void reduce_gradients() override {
    if (all_.blocking_) all_.reduce_gradients(partition_, replica_);
  }
  std::optional<StepLoss> combine_loss(const StepLoss& loss) override { return all_.combine_loss(replica_, loss); }

 private:
  LocalReplicas& all_;
  int replica_, partition_;
};

LocalReplicas::LocalReplicas(std::vector<Stage*> stages, int partitions, const SegmentContext& context,
                             bool blocking)
    : stages_(std::move(stages)), partitions_(partitions), replicas_(static_cast<int>(stages_.size()) / partitions),
      context_(context), blocking_(blocking), meetings_(static_cast<size_t>(partitions)) {
  for (Meeting& m : meetings_) m.ready.resize(static_cast<size_t>(replicas_));
  for (int r = 0; r < replicas_; ++r) {
    // Replica 0 runs at most a pipeline's depth ahead of the others: no push ever waits.
    slices_.push_back(std::make_unique<Channel<exec::Input>>(std::numeric_limits<size_t>::max()));
    for (int k = 0; k < partitions_; ++k) {
      peers_.push_back(std::make_unique<Peers>(*this, r, k));
      buckets_.emplace_back(stages_[r * partitions_ + k]->optimizer().params());
    }
  }
}

LocalReplicas::~LocalReplicas() = default;

ReplicaPeers& LocalReplicas::peers(int replica, int partition) { return *peers_[replica * partitions_ + partition]; }

SegmentContext LocalReplicas::context_for(int replica) const {
  SegmentContext c = context_;
  c.stop = nullptr;  // replica 0's input callback reads it, for every replica
  c.input = [this, replica](int64_t step) { return const_cast<LocalReplicas*>(this)->next_slice(replica, step); };
  if (c.on_op) {  // a lane per worker of every replica: r x K + k
    c.on_op = [on_op = context_.on_op, first = replica * partitions_](int worker, const schedule::Op& op,
                                                                       double start, double end) {
      on_op(first + worker, op, start, end);
    };
  }
  return c;
}

exec::Input LocalReplicas::next_slice(int replica, int64_t step) {
  if (replica > 0) {
    std::optional<exec::Input> in = slices_[replica]->pop();
    if (!in) throw Cancelled();
    return std::move(*in);
  }
  exec::Input whole;
  if (!context_.stop || !context_.stop->load()) whole = context_.input(step);
  if (!whole.x.defined()) {  // the end of the segment for every replica
    for (int r = 1; r < replicas_; ++r) slices_[r]->push(exec::Input{});
    return whole;
  }
  const int64_t n = whole.x.size(0);
  SP_CHECK(n >= replicas_, "mini-batch ", step, " has ", n, " samples, fewer than the ", replicas_, " replicas");
  exec::Input first;
  for (int r = 0; r < replicas_; ++r) {
    const auto [begin, end] = slice_range(n, replicas_, r);
    // Views of the whole batch: each replica's stream waits for the batch's own event.
    exec::Input slice{whole.x.narrow(0, begin, end - begin), whole.target.narrow(0, begin, end - begin),
                      whole.batch_samples > 0 ? whole.batch_samples : n, whole.ready};
    if (r == 0) {
      first = std::move(slice);
    } else {
      slices_[r]->push(std::move(slice));
    }
  }
  return first;
}

void LocalReplicas::reduce_partition(int partition) {
  std::vector<Event> ready;
  for (int r = 0; r < replicas_; ++r) ready.push_back(stages_[r * partitions_ + partition]->stream().record());
  const Event summed = sum_gradients(partition, 0, ready);
  for (int r = 1; r < replicas_; ++r) stages_[r * partitions_ + partition]->stream().wait(summed.get());
}

LocalReplicas::Event LocalReplicas::sum_gradients(int partition, int summer, const std::vector<Event>& ready) {
  DeviceStream& stream = stages_[summer * partitions_ + partition]->stream();
  const auto on_stream = stream.enter();
  for (const Event& e : ready) stream.wait(e.get());
  const GradientBuckets& layout = buckets_[partition];
  for (size_t b = 0; b < layout.size(); ++b) {
    std::vector<torch::Tensor> packs;
    for (int r = 0; r < replicas_; ++r) packs.push_back(buckets_[r * partitions_ + partition].pack(b));
    const torch::Tensor sum = sum_in_order(packs);
    for (int r = 0; r < replicas_; ++r) buckets_[r * partitions_ + partition].unpack(b, sum);
  }
  // A gradient the sum allocated for another replica is freed on that replica's stream: its
  // memory must not be reused before that stream's work queued by then is done.
  for (int r = 0; r < replicas_; ++r) {
    if (r == summer) continue;
    Stage& other = *stages_[r * partitions_ + partition];
    for (const torch::Tensor& p : other.optimizer().params()) other.stream().hold(p.grad());
  }
  return stream.record();
}

// The last replica to arrive computes the sum for all, on its stream; the others wait for it,
// then order their streams after it.
void LocalReplicas::reduce_gradients(int partition, int replica) {
  DeviceStream& mine = stages_[replica * partitions_ + partition]->stream();
  std::unique_lock<std::mutex> lock(mutex_);
  Meeting& m = meetings_[partition];
  m.ready[replica] = mine.record();
  const int64_t generation = m.generation;
  if (++m.arrived < replicas_) {
    changed_.wait(lock, [&] { return closed_ || m.generation != generation; });
    if (m.generation == generation) throw Cancelled();
    mine.wait(m.summed.get());
    return;
  }
  m.arrived = 0;
  const std::vector<Event> ready = m.ready;
  lock.unlock();
  Event summed;
  try {
    summed = sum_gradients(partition, replica, ready);
  } catch (...) {
    close();
    throw;
  }
  lock.lock();
  m.summed = std::move(summed);
  ++m.generation;
  changed_.notify_all();
}

std::optional<StepLoss> LocalReplicas::combine_loss(int replica, const StepLoss& loss) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slices = losses_[loss.step];
  slices.resize(static_cast<size_t>(replicas_));
  slices[replica] = loss;
  std::vector<StepLoss> all;
  for (const auto& s : slices) {
    if (!s) return std::nullopt;
    all.push_back(*s);
  }
  losses_.erase(loss.step);
  return combine_losses(all);
}

void LocalReplicas::copy_buffers() {
  torch::NoGradGuard no_grad;
  for (int k = 0; k < partitions_; ++k) {
    const auto from = stages_[k]->module()->buffers();
    for (int r = 1; r < replicas_; ++r) {
      const auto to = stages_[r * partitions_ + k]->module()->buffers();
      for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    }
  }
}

void LocalReplicas::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
  for (auto& c : slices_) c->close();
}

}  // namespace stalepipe::exec::detail
