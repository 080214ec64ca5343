// The reference executor: one thread, every operation in the schedule's global order.
#include <deque>
#include <optional>

#include <ATen/Parallel.h>

#include "executors_impl.h"
#include "replicas_impl.h"
#include "worker_impl.h"

namespace stalepipe::exec {
namespace {

// Mailboxes, one per route: messages wait in FIFO order until the receiving worker's operation
// runs.
class MailboxLinks final : public detail::Links {
 public:
  explicit MailboxLinks(const detail::Wiring& wiring) : boxes_(wiring.routes().size()) {}
  void send(const detail::Route& route, detail::Message m) override {
    boxes_[route.id].push_back(std::move(m));
  }
  detail::Message recv(const detail::Route& route) override {
    auto& box = boxes_[route.id];
    SP_CHECK(!box.empty(), "emulated executor: worker ", route.destination + 1,
             " waits for a message that the global order has not produced");
    detail::Message m = std::move(box.front());
    box.pop_front();
    return m;
  }

 private:
  std::vector<std::deque<detail::Message>> boxes_;  // [route id]
};

}  // namespace

SegmentResult EmulatedExecutor::run(const schedule::Schedule& schedule,
                                    std::vector<Stage*>& stages, const SegmentContext& context) {
  const int K = schedule.num_workers;
  const int R = detail::replica_count(schedule, stages);
  const auto wiring = detail::Wiring::pipeline({stages.begin(), stages.begin() + K});
  std::vector<std::unique_ptr<MailboxLinks>> links;  // [replica]
  std::vector<detail::Links*> link_ptrs;
  for (int r = 0; r < R; ++r) {
    links.push_back(std::make_unique<MailboxLinks>(wiring));
    link_ptrs.push_back(links.back().get());
  }
  // Replicas run each operation in replica order; their gradient sum runs before their updates.
  detail::LocalWorkers workers;
  detail::build_local_workers(workers, schedule, wiring, stages, link_ptrs, context, /*blocking=*/false);
  auto& loops = workers.loops;  // [r * K + k]
  auto& replicas = workers.replicas;
  // The loop's step, not the op's: a loss read late names the step it belongs to.
  auto fail = [&](int i) {
    detail::clear_in_flight(stages);
    detail::rethrow_with_context(std::current_exception(), i % K, loops[i].current_step(), R > 1 ? i / K : -1);
  };
  std::vector<size_t> next(K, 0);
  int current_threads = -1;
  for (const auto& g : schedule::global_order(schedule)) {
    const int threads = g.worker < static_cast<int>(context.threads_per_worker.size())
                            ? context.threads_per_worker[g.worker]
                            : 0;
    if (threads > 0 && threads != current_threads) {
      at::set_num_threads(threads);
      current_threads = threads;
    }
    const size_t op = next[g.worker]++;
    int i = g.worker;
    try {
      if (replicas && g.op.kind == schedule::OpKind::kUpdate && g.op.step < loops[g.worker].cutoff()) {
        replicas->reduce_partition(g.worker);
      }
      for (int r = 0; r < R; ++r) {
        i = r * K + g.worker;
        loops[i].run_op(op);
      }
    } catch (...) {
      fail(i);
    }
  }
  for (size_t i = 0; i < loops.size(); ++i) {
    try {
      loops[i].finish();
    } catch (...) {
      fail(static_cast<int>(i));
    }
  }
  if (replicas) replicas->copy_buffers();
  SegmentResult result;
  result.end_step = loops[0].cutoff();
  result.stopped = result.end_step < schedule.end_step;
  return result;
}

}  // namespace stalepipe::exec
