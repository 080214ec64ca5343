// One thread per partition; pipeline registers are bounded channels between neighbours.
#include <algorithm>
#include <mutex>
#include <thread>

#include <ATen/Parallel.h>

#include "executors_impl.h"
#include "stalepipe/common/channel.h"
#include "worker_impl.h"

namespace stalepipe::exec {
namespace {

class ChannelLinks final : public detail::Links {
 public:
  // A channel per route. capacity[k]: messages that may wait on a route whose upstream end is
  // worker k (its in-flight count, plus a stop marker), so a send never blocks in a correct run.
  ChannelLinks(const detail::Wiring& wiring, const std::vector<size_t>& capacity) {
    for (const detail::Route& r : wiring.routes()) {
      channels_.push_back(std::make_unique<Channel<detail::Message>>(capacity[std::min(r.source, r.destination)]));
    }
  }
  void send(const detail::Route& route, detail::Message m) override {
    if (!channels_[route.id]->push(std::move(m))) throw detail::Cancelled();
  }
  detail::Message recv(const detail::Route& route) override {
    auto m = channels_[route.id]->pop();
    if (!m) throw detail::Cancelled();
    return std::move(*m);
  }

  void close_all() {
    for (auto& c : channels_) c->close();
  }

 private:
  std::vector<std::unique_ptr<Channel<detail::Message>>> channels_;  // [route id]
};

}  // namespace

SegmentResult ThreadsExecutor::run(const schedule::Schedule& schedule,
                                   std::vector<Stage*>& stages, const SegmentContext& context) {
  detail::check_stages(schedule, stages);
  const int K = schedule.num_workers;
  const auto stats = schedule::analyze(schedule);
  std::vector<size_t> capacity;
  for (int k = 0; k + 1 < K; ++k) {
    capacity.push_back(static_cast<size_t>(stats.workers[k].max_in_flight) * schedule.micro_batches + 1);
  }
  const auto wiring = detail::Wiring::pipeline(stages);
  ChannelLinks links(wiring, capacity);

  std::mutex error_mutex;
  std::exception_ptr first_error;
  int error_worker = -1;
  int64_t error_step = -1;
  std::vector<detail::WorkerLoop> loops;
  loops.reserve(K);
  for (int k = 0; k < K; ++k) loops.emplace_back(schedule, wiring, k, *stages[k], links, context);

  auto body = [&](int k) {
    detail::use_worker_threads(context, k);
    auto& loop = loops[k];
    try {
      loop.run_all();
    } catch (const detail::Cancelled&) {
      // Another worker failed first; its error is the one reported.
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) {
          first_error = std::current_exception();
          error_worker = k;
          error_step = loop.current_step();
        }
      }
      links.close_all();
      if (context.on_abort) context.on_abort();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(K);
  for (int k = 0; k < K; ++k) threads.emplace_back(body, k);
  for (auto& t : threads) t.join();

  if (first_error) {
    for (Stage* s : stages) s->clear_in_flight();
    detail::rethrow_with_context(first_error, error_worker, error_step);
  }
  SegmentResult result;
  result.end_step = loops[0].cutoff();
  result.stopped = result.end_step < schedule.end_step;
  return result;
}

}  // namespace stalepipe::exec
