// One rank per partition over c10d (TCPStore + ProcessGroupGloo); see exec/processes.h.
#include "process_group_impl.h"

#include <algorithm>
#include <numeric>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "stalepipe/common/error.h"
#include "replicas_impl.h"
#include "worker_impl.h"

namespace stalepipe::exec {

std::string describe(int rank, int partitions, int replicas) {
  if (rank < 0) return "a rank";
  return c10::str("rank ", rank, " (", replicas > 1 ? c10::str("replica ", rank / partitions + 1, ", ") : std::string(),
                  "partition ", rank % partitions + 1, ")");
}

namespace {

// step, stop, defined, dtype, ndim, dims[0..6], aux, memory order
constexpr int64_t kHeaderSize = 14;
constexpr int64_t kMaxDims = 7;

// The order of a dense tensor's dimensions in memory, outermost first; empty where that is the
// order of its dimensions (contiguous) or it has gaps or overlaps (it goes contiguous).
std::vector<int64_t> memory_order(const torch::Tensor& t) {
  if (t.is_contiguous() || !t.is_non_overlapping_and_dense()) return {};
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return order;
}

// An order as one header word, 3 bits a dimension; 0: none.
int64_t encode_order(const std::vector<int64_t>& order) {
  int64_t word = 0;
  for (size_t d = 0; d < order.size(); ++d) word |= order[d] << (3 * d);
  return order.empty() ? 0 : word | (int64_t{1} << 62);
}

std::vector<int64_t> decode_order(int64_t word, size_t dims) {
  if (word == 0) return {};
  std::vector<int64_t> order(dims);
  for (size_t d = 0; d < dims; ++d) order[d] = (word >> (3 * d)) & 7;
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t d = 0; d < dims; ++d) {
    SP_CHECK(sorted[d] == static_cast<int64_t>(d), "a message's header holds no order of ", dims, " dimensions");
  }
  return order;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

ProcessGroup::ProcessGroup(const ProcessGroupOptions& options, const std::string& config_hash, int replicas)
    : impl_(std::make_unique<Impl>()) {
  const ProcessGroupOptions o = options.resolved();
  rank_ = o.rank();
  size_ = o.world_size();
  SP_CHECK_ARG(replicas >= 1 && size_ % replicas == 0, "WORLD_SIZE ", size_, " is not a multiple of the ", replicas,
               " replicas; start replicas x partitions ranks");
  replicas_ = replicas;
  impl_->partitions = partitions();
  impl_->replicas = replicas;
  timeout_ = std::chrono::seconds(o.timeout_seconds());
  const std::string where = c10::str(o.master_addr(), ":", o.master_port());
  connect_store(o, where);
  impl_->calls = std::make_unique<StoreCalls>(impl_->store);
  impl_->watch = std::make_unique<WaitWatch>(*impl_->calls, rank_, size_, timeout_);
  compare_configs(config_hash, where, o.timeout_seconds());
  connect_gloo(o, where);
  if (replicas_ > 1) connect_replicas(where);
  impl_->reaper = std::thread([impl = impl_.get(), t = timeout_, s = o.timeout_seconds()] {
    impl->reap(t, s);
  });
}

void ProcessGroup::connect_store(const ProcessGroupOptions& o, const std::string& where) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(o.master_port());
  store_options.isServer = rank_ == 0;
  store_options.numWorkers = size_;
  store_options.waitWorkers = false;  // the hash exchange below waits, and names who is missing
  store_options.timeout = timeout_;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(o.master_addr(), store_options);
  } catch (const std::exception& e) {
    if (rank_ == 0) {
      throw RuntimeError(c10::str("rank 0 cannot serve the rendezvous on ", where,
                                  " (is the port already in use? choose another MASTER_PORT or "
                                  "ProcessGroupOptions::master_port): ", e.what()));
    }
    throw RuntimeError(c10::str("rank ", rank_, " cannot reach the master (rank 0) at ", where,
                                " within ", o.timeout_seconds(),
                                " s; check MASTER_ADDR/MASTER_PORT and that rank 0 runs: ",
                                e.what()));
  }

}

// Every rank publishes its hash, then compares all of them.
void ProcessGroup::compare_configs(const std::string& config_hash, const std::string& where,
                                   int timeout_seconds) {
  auto key = [](int r) { return c10::str("stalepipe/config/", r); };
  StoreCalls& store = *impl_->calls;
  store.run([k = key(rank_), v = std::vector<uint8_t>(config_hash.begin(), config_hash.end())](c10d::Store& s) {
    s.set(k, v);
  }, timeout_);
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(r));
  try {
    store.run([keys, t = timeout_](c10d::Store& s) { s.wait(keys, t); }, timeout_ + kStoreReply);
  } catch (const std::exception& e) {
    std::string missing;
    try {
      for (int r = 0; r < size_; ++r) {
        const bool there = store.run([k = key(r)](c10d::Store& s) { return s.check({k}); }, kStoreReply);
        if (!there) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    } catch (const std::exception&) {
      missing = "unknown (the master is gone)";
    }
    throw RuntimeError(c10::str("rank ", rank_, ": rendezvous at ", where, " incomplete after ",
                                timeout_seconds, " s; missing rank(s): ", missing,
                                " of WORLD_SIZE ", size_));
  }
  std::string mismatch;
  for (int r = 0; r < size_ && mismatch.empty(); ++r) {
    const auto bytes = store.run([k = key(r)](c10d::Store& s) { return s.get(k); }, kStoreReply);
    const std::string other(bytes.begin(), bytes.end());
    if (other != config_hash) {
      mismatch = c10::str("rank ", rank_, ": rank ", r,
                          " was started with a different configuration (config hash ", other,
                          ", this rank ", config_hash,
                          "); start every rank with the same options");
    }
  }
  // Rank 0 serves the store: it stays until every rank has compared, so that each one can
  // report the mismatch itself rather than a lost master.
  auto add = [&store](int64_t value) {
    return store.run([value](c10d::Store& s) { return s.add("stalepipe/compared", value); }, kStoreReply);
  };
  add(1);
  if (rank_ == 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (add(0) < size_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!mismatch.empty()) throw RuntimeError(mismatch);

}

void ProcessGroup::connect_gloo(const ProcessGroupOptions& o, const std::string& where) {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout_);
  try {
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (is_loopback(o.master_addr())) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", impl_->store), rank_, size_, gloo_options);
    impl_->gloo_options = gloo_options;
  } catch (const std::exception& e) {
    throw RuntimeError(c10::str("rank ", rank_, ": cannot connect the Gloo process group (",
                                size_, " ranks, rendezvous ", where, "): ", e.what()));
  }
}

ProcessGroup::~ProcessGroup() {
  // Rank 0 serves the store: after a failure it stays until every rank has read which rank
  // failed first (or a few seconds), or those failing after it would find no record.
  if (failed_ && rank_ == 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(3));
    try {
      while (impl_->calls->run([](c10d::Store& s) { return s.add("stalepipe/failures", 0); }, kStoreReply) < size_ &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception&) {
      // The store is broken too: nothing to wait for.
    }
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->closing = true;
  }
  impl_->changed.notify_all();
  if (failed_) {
    // Peers are gone or broken: Gloo's teardown could wait for them. The process is about to
    // report the error and exit, so the group is left as it is, with the sends still pending:
    // destroying one while the reaper waits on another races with Gloo, which signals every
    // buffer of a broken connection from the waiting thread.
    impl_->reaper.detach();
    (void)impl_.release();
    return;
  }
  impl_->reaper.join();
}

[[noreturn]] void ProcessGroup::fail(int peer, const std::string& what, const std::exception& e) {
  failed_ = true;
  const std::string message = one_line_message(e);
  const bool timed_out = message.find("imed out") != std::string::npos ||
                         message.find("imeout") != std::string::npos;
  auto name = [&](int r) { return describe(r, impl_->partitions, impl_->replicas); };
  // A timeout may be a cascade: the peer waits for a third rank, or rank 0's host is cut off.
  const bool store = !timed_out || impl_->watch->store_answers();
  int silent = timed_out && store ? impl_->watch->silent_one(peer) : peer;
  const bool lost_in_collective = !timed_out && store && peer == WaitWatch::kAnyRank;
  if (lost_in_collective) {
    // A collective names no peer: the one rank that never records a failure is the one gone.
    // This rank's record first, as the others look for it too.
    try {
      impl_->watch->record_failure();
    } catch (const std::exception&) {
      // Gone with rank 0: the search below finds no one.
    }
    silent = impl_->watch->gone_from_collective(kGoneFromCollectivePatience);
  }
  const std::string first = store ? first_loss(silent) : std::string();
  // Not a record naming this rank: a rank that times out closes its connections, and its
  // other peers may see it go before it has recorded the silent rank.
  const bool other = !first.empty() && first != name(silent) && first != name(rank_);
  if (store) {
    try {
      if (!lost_in_collective) impl_->watch->record_failure();  // that one recorded it already
      // Read by rank 0 before it goes (see the destructor).
      impl_->calls->run([](c10d::Store& s) { return s.add("stalepipe/failures", 1); }, kStoreReply);
    } catch (const std::exception&) {
      // Gone with rank 0.
    }
  }
  const std::string who = silent == peer || peer < 0 ? name(silent) : c10::str(name(silent), ", which ", name(peer), " waits for,");
  throw RuntimeError(c10::str(other ? first + " failed first; " : std::string(), who,
                              timed_out ? c10::str(" did not answer within ", timeout_.count() / 1000, " s")
                                        : std::string(" is gone (connection lost; it died or failed)"),
                              store ? "" : " and rank 0's host (the rendezvous store) is out of reach too",
                              " while this rank (", rank_, ") waited to ", what, ": ", message));
}

// When a rank dies, its neighbours lose their connections, fail, and exit, and the ranks
// beyond them see those neighbours go: each would name a different rank. The first loss a rank
// sees goes on record at once (the first record wins), and every rank names the record: a peer
// that is gone or, after a timeout, the silent rank at the end of the recorded waits. A rank
// that knows no peer (`lost` < 0) waits a little for a record. Empty if the store is out of reach.
std::string ProcessGroup::first_loss(int lost) {
  const std::string key = "stalepipe/first-loss";
  try {
    if (lost >= 0) {
      const std::string mine = describe(lost, impl_->partitions, impl_->replicas);
      const auto v = impl_->calls->run(
          [key, mine](c10d::Store& s) { return s.compareSet(key, {}, std::vector<uint8_t>(mine.begin(), mine.end())); },
          kStoreReply);
      return std::string(v.begin(), v.end());
    }
    if (!impl_->calls->has(key, std::chrono::seconds(2))) return "";
    const auto v = impl_->calls->run([key](c10d::Store& s) { return s.get(key); }, kStoreReply);
    return std::string(v.begin(), v.end());
  } catch (const std::exception&) {
    return "";
  }
}

// A send the reaper saw fail is reported as a failed wait is (fail): the silent rank named and
// on record, so that the ranks that wait for this one name it too.
void ProcessGroup::fail_if_a_send_failed() {
  std::string error;
  int peer = -1;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    error = impl_->error;
    peer = impl_->error_peer;
  }
  if (!error.empty()) fail(peer, "send to it", std::runtime_error(error));
}

void ProcessGroup::send(const torch::Tensor& tensor, int dst, int tag) {
  fail_if_a_send_failed();
  std::vector<at::Tensor> tensors{tensor.to(torch::kCPU).contiguous()};
  PendingSend pending;
  try {
    pending.work = impl_->group->send(tensors, dst, tag);
  } catch (const std::exception& e) {
    fail(dst, "send", e);
  }
  pending.tensor = tensors[0];
  pending.peer = dst;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->pending.push_back(std::move(pending));
  }
  impl_->changed.notify_all();
}

void ProcessGroup::recv(torch::Tensor& tensor, int src, int tag) {
  std::vector<at::Tensor> tensors{tensor};
  const WaitWatch::Scope waiting(impl_->watch.get(), src);
  try {
    // Gloo ends a receive whose peer closed the connection without an exception but reports
    // it as not completed.
    if (!impl_->group->recv(tensors, src, tag)->wait(timeout_)) {
      throw std::runtime_error("the receive was aborted (connection closed)");
    }
  } catch (const std::exception& e) {
    fail(src, "receive", e);
  }
}

void ProcessGroup::send_tensor(const torch::Tensor& tensor, int dst, int tag, int64_t step,
                               bool stop, int64_t aux) {
  auto header = torch::zeros({kHeaderSize}, torch::kLong);
  auto h = header.accessor<int64_t, 1>();
  h[0] = step;
  h[1] = stop ? 1 : 0;
  h[12] = aux;
  const bool payload = tensor.defined() && !stop;
  h[2] = payload ? 1 : 0;
  if (payload) {
    SP_CHECK(tensor.dim() <= kMaxDims, "cannot send a tensor of ", tensor.dim(), " dimensions");
    h[3] = static_cast<int64_t>(tensor.scalar_type());
    h[4] = tensor.dim();
    for (int64_t d = 0; d < tensor.dim(); ++d) h[5 + d] = tensor.size(d);
  }
  // A dense tensor goes as the permutation of it that is contiguous (a channels-last activation
  // as NHWC, a gradient as autograd left it), and arrives with the same strides: no copy on
  // either side, and the receiver computes on the layout the threads executor hands over.
  const std::vector<int64_t> order = payload ? memory_order(tensor) : std::vector<int64_t>();
  h[13] = encode_order(order);
  send(header, dst, tag);
  if (payload) send(order.empty() ? tensor : tensor.permute(order), dst, tag + 1);
}

ProcessGroup::Received ProcessGroup::recv_tensor(int src, int tag) {
  auto header = torch::zeros({kHeaderSize}, torch::kLong);
  recv(header, src, tag);
  auto h = header.accessor<int64_t, 1>();
  Received r;
  r.step = h[0];
  r.stop = h[1] != 0;
  r.aux = h[12];
  if (h[2] != 0) {
    std::vector<int64_t> shape(h[4]);
    for (int64_t d = 0; d < h[4]; ++d) shape[d] = h[5 + d];
    const std::vector<int64_t> order = decode_order(h[13], shape.size());
    std::vector<int64_t> sent = shape, back(order.size());
    for (size_t d = 0; d < order.size(); ++d) {
      sent[d] = shape[order[d]];
      back[order[d]] = static_cast<int64_t>(d);
    }
    torch::Tensor buffer = torch::empty(sent, torch::TensorOptions().dtype(static_cast<c10::ScalarType>(h[3])));
    recv(buffer, src, tag + 1);
    r.tensor = order.empty() ? buffer : buffer.permute(back);  // the sender's sizes and strides
  }
  return r;
}

void ProcessGroup::flush() {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->changed.wait(lock, [&] { return impl_->pending.empty() && !impl_->busy; });
  lock.unlock();
  fail_if_a_send_failed();
}

// Of two ranks the other is the one a collective waits for; of more, Gloo's relay order
// decides which it was, and the store's records tell (WaitWatch).
int ProcessGroup::collective_peer() const { return size_ == 2 ? 1 - rank_ : WaitWatch::kAnyRank; }

void ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  const WaitWatch::Scope waiting(impl_->watch.get(), collective_peer());
  try {
    if (!impl_->group->broadcast(tensors, options)->wait(timeout_)) {
      throw std::runtime_error("the broadcast was aborted");
    }
  } catch (const std::exception& e) {
    const std::string what = rank_ == root ? std::string("send a broadcast") : c10::str("receive a broadcast from rank ", root);
    fail(collective_peer(), what, e);
  }
}

void ProcessGroup::barrier() {
  const WaitWatch::Scope waiting(impl_->watch.get(), collective_peer());
  try {
    if (!impl_->group->barrier()->wait(timeout_)) throw std::runtime_error("the barrier was aborted");
  } catch (const std::exception& e) {
    fail(collective_peer(), "pass a barrier", e);
  }
}

namespace {

// Tags: each (step, micro-batch) index has a block of tags, two (header, payload) for every
// tensor of every route (evaluation and the replicas' words have ranges of their own:
// distributed_predict.cpp, replica_group.cpp).

// Worker `rank`'s links over the group. A message goes as its tensors in the route's order,
// each a header and a payload (the first header carries the stop mark and the batch size); a
// stop marker is one header. recv() does not get the step, so the links follow the worker's
// operation list: the n-th message of an activation route belongs to the worker's n-th
// forward, of a gradient route to its n-th backward (a stopped segment skips only a suffix of
// forwards and backwards).
class GroupLinks final : public detail::Links {
 public:
  // worker: this rank's partition; first_rank: the rank of its replica's partition 1.
  GroupLinks(ProcessGroup& group, const detail::Wiring& wiring, const schedule::Schedule& schedule, int worker,
             int first_rank)
      : group_(group), micro_batches_(schedule.micro_batches), first_rank_(first_rank),
        received_(wiring.routes().size(), 0) {
    for (const auto& route : wiring.routes()) {
      first_tag_.push_back(tags_per_index_);
      tags_per_index_ += 2 * static_cast<int64_t>(route.names.size());
    }
    SP_CHECK(tags_per_index_ <= 512, "processes executor: ", tags_per_index_,
             " tags per mini-batch are more than the 512 the tag space holds");
    for (const auto& op : schedule.worker_ops[worker]) {
      if (op.kind == schedule::OpKind::kForward) forwards_.push_back(op);
      if (op.kind == schedule::OpKind::kBackward) backwards_.push_back(op);
    }
  }
  void send(const detail::Route& route, detail::Message m) override {
    const int destination = first_rank_ + route.destination;
    if (m.stop) {
      group_.send_tensor({}, destination, tag(route, m.step, m.micro, 0), m.step, true);
      return;
    }
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      group_.send_tensor(m.tensors[i].second, destination, tag(route, m.step, m.micro, i), m.step, false,
                         m.batch_samples);
    }
  }
  detail::Message recv(const detail::Route& route) override {
    const bool forward = route.lane == detail::Lane::kActivation;
    const schedule::Op op = next(forward ? forwards_ : backwards_, received_[route.id]);
    detail::Message m;
    m.micro = op.micro;
    for (size_t i = 0; i < route.names.size(); ++i) {
      auto in = group_.recv_tensor(first_rank_ + route.source, tag(route, op.step, op.micro, i));
      m.step = in.step;
      m.stop = in.stop;
      if (m.stop) break;
      m.batch_samples = in.aux;
      m.put(route.names[i], std::move(in.tensor));
    }
    return m;
  }

 private:
  int tag(const detail::Route& route, int64_t step, int micro, size_t tensor) const {
    const int64_t index = (step * micro_batches_ + micro) % (1 << 20);
    return static_cast<int>(index * tags_per_index_ + first_tag_[route.id] + 2 * static_cast<int64_t>(tensor));
  }
  static schedule::Op next(const std::vector<schedule::Op>& ops, size_t& i) {
    SP_CHECK(i < ops.size(), "processes executor: more messages than the schedule has operations");
    return ops[i++];
  }
  ProcessGroup& group_;
  int micro_batches_;
  int first_rank_;
  std::vector<int64_t> first_tag_;  // [route id]: its first tag within an index's block
  int64_t tags_per_index_ = 0;
  std::vector<schedule::Op> forwards_, backwards_;
  std::vector<size_t> received_;  // [route id]: messages received on it
};

class ProcessesExecutor final : public Executor {
 public:
  explicit ProcessesExecutor(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  std::string name() const override { return "processes"; }

  SegmentResult run(const schedule::Schedule& schedule, std::vector<Stage*>& stages,
                    const SegmentContext& context) override {
    const int K = schedule.num_workers;
    SP_CHECK(K == group_->partitions(), "schedule has ", K, " workers but the process group has ",
             group_->partitions(), " ranks per replica");
    detail::check_stages(schedule, stages);
    const int k = group_->partition();
    const bool replicas = group_->replicas() > 1;
    detail::use_worker_threads(context, k);
    const auto wiring = detail::Wiring::pipeline(stages);
    GroupLinks links(*group_, wiring, schedule, k, group_->replica() * K);
    std::unique_ptr<detail::ReplicaPeers> peers;
    SegmentContext own = context;
    if (replicas) {
      peers = detail::make_group_peers(*group_, *stages[k]);
      if (k == 0) own = detail::agreed_input(*group_, context);
    }
    detail::WorkerLoop loop(detail::WorkerLoopOptions()
                                .schedule(&schedule)
                                .wiring(&wiring)
                                .worker(k)
                                .stage(stages[k])
                                .links(&links)
                                .context(&own)
                                .peers(peers.get()));
    try {
      loop.run_all();
      group_->flush();
      // Replica 0's statistics for evaluation and checkpoints, as DDP's broadcast gives them.
      if (replicas) detail::broadcast_buffers(*group_, *stages[k]);
    } catch (...) {
      stages[k]->clear_in_flight();
      group_->mark_failed();
      detail::rethrow_with_context(std::current_exception(), k, loop.current_step(), replicas ? group_->replica() : -1);
    }
    SegmentResult result;
    result.end_step = loop.cutoff();
    result.stopped = result.end_step < schedule.end_step;
    return result;
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace

std::unique_ptr<Executor> make_processes_executor(std::shared_ptr<ProcessGroup> group) {
  SP_CHECK_ARG(group != nullptr, "the processes executor needs a process group");
  return std::make_unique<ProcessesExecutor>(std::move(group));
}

}  // namespace stalepipe::exec
