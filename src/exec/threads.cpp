// One thread per partition (of each replica); pipeline registers are bounded channels between
// neighbours.
#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include <ATen/Parallel.h>

#include "executors_impl.h"
#include "replicas_impl.h"
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
  const int K = schedule.num_workers;
  const int R = detail::replica_count(schedule, stages);
  const auto stats = schedule::analyze(schedule);
  std::vector<size_t> capacity;
  for (int k = 0; k + 1 < K; ++k) {
    capacity.push_back(static_cast<size_t>(stats.workers[k].max_in_flight) * schedule.micro_batches + 1);
  }
  const auto wiring = detail::Wiring::pipeline({stages.begin(), stages.begin() + K});
  std::vector<std::unique_ptr<ChannelLinks>> links;  // [replica]
  std::vector<detail::Links*> link_ptrs;
  for (int r = 0; r < R; ++r) {
    links.push_back(std::make_unique<ChannelLinks>(wiring, capacity));
    link_ptrs.push_back(links.back().get());
  }
  detail::LocalWorkers workers;
  detail::build_local_workers(workers, schedule, wiring, stages, link_ptrs, context, /*blocking=*/true);
  auto& loops = workers.loops;
  auto& replicas = workers.replicas;

  std::mutex error_mutex;
  std::exception_ptr first_error;
  int error_worker = -1;
  int64_t error_step = -1;

  auto body = [&](int i) {
    detail::use_worker_threads(context, i % K);
    auto& loop = loops[i];
    try {
      loop.run_all();
    } catch (const detail::Cancelled&) {
      // Another worker failed first; its error is the one reported.
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) {
          first_error = std::current_exception();
          error_worker = i;
          error_step = loop.current_step();
        }
      }
      for (auto& l : links) l->close_all();
      if (replicas) replicas->close();
      if (context.on_abort) context.on_abort();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(loops.size());
  for (size_t i = 0; i < loops.size(); ++i) threads.emplace_back(body, static_cast<int>(i));
  for (auto& t : threads) t.join();

  if (first_error) {
    detail::clear_in_flight(stages);
    detail::rethrow_with_context(first_error, error_worker % K, error_step, R > 1 ? error_worker / K : -1);
  }
  if (replicas) replicas->copy_buffers();
  SegmentResult result;
  result.end_step = loops[0].cutoff();
  result.stopped = result.end_step < schedule.end_step;
  return result;
}

}  // namespace stalepipe::exec
