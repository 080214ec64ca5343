// The reference executor: one thread, every operation in the schedule's global order.
#include <deque>

#include <ATen/Parallel.h>

#include "executors_impl.h"
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
  detail::check_stages(schedule, stages);
  const int K = schedule.num_workers;
  const auto wiring = detail::Wiring::pipeline(stages);
  MailboxLinks links(wiring);
  std::vector<detail::WorkerLoop> loops;
  loops.reserve(K);
  for (int k = 0; k < K; ++k) loops.emplace_back(schedule, wiring, k, *stages[k], links, context);
  // The loop's step, not the op's: a loss read late names the step it belongs to.
  auto fail = [&](int worker) {
    for (Stage* s : stages) s->clear_in_flight();
    detail::rethrow_with_context(std::current_exception(), worker, loops[worker].current_step());
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
    try {
      loops[g.worker].run_op(next[g.worker]++);
    } catch (...) {
      fail(g.worker);
    }
  }
  for (int k = 0; k < K; ++k) {
    try {
      loops[k].finish();
    } catch (...) {
      fail(k);
    }
  }
  SegmentResult result;
  result.end_step = loops[0].cutoff();
  result.stopped = result.end_step < schedule.end_step;
  return result;
}

}  // namespace stalepipe::exec
