// One thread per partition; pipeline registers are bounded channels between neighbours.
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
  // capacity[k]: messages that may wait between worker k and k+1 in either direction. Sized
  // from the schedule (the upstream worker's in-flight count, plus a stop marker), so a send
  // never blocks in a correct run.
  explicit ChannelLinks(const std::vector<size_t>& capacity) {
    for (size_t c : capacity) {
      down_.push_back(std::make_unique<Channel<detail::Message>>(c));
      up_.push_back(std::make_unique<Channel<detail::Message>>(c));
    }
  }
  detail::Message recv_activation(int worker) override { return take(*down_[worker - 1]); }
  void send_activation(int worker, detail::Message m) override { put(*down_[worker], std::move(m)); }
  detail::Message recv_gradient(int worker) override { return take(*up_[worker]); }
  void send_gradient(int worker, detail::Message m) override { put(*up_[worker - 1], std::move(m)); }

  void close_all() {
    for (auto& c : down_) c->close();
    for (auto& c : up_) c->close();
  }

 private:
  static detail::Message take(Channel<detail::Message>& channel) {
    auto m = channel.pop();
    if (!m) throw detail::Cancelled();
    return std::move(*m);
  }
  static void put(Channel<detail::Message>& channel, detail::Message m) {
    if (!channel.push(std::move(m))) throw detail::Cancelled();
  }
  std::vector<std::unique_ptr<Channel<detail::Message>>> down_;  // k -> k+1: activations
  std::vector<std::unique_ptr<Channel<detail::Message>>> up_;    // k+1 -> k: gradients
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
  ChannelLinks links(capacity);

  std::mutex error_mutex;
  std::exception_ptr first_error;
  int error_worker = -1;
  int64_t error_step = -1;
  std::vector<detail::WorkerLoop> loops;
  loops.reserve(K);
  for (int k = 0; k < K; ++k) loops.emplace_back(schedule, k, *stages[k], links, context);

  auto body = [&](int k) {
    detail::use_worker_threads(context, k);
    auto& loop = loops[k];
    try {
      for (size_t i = 0; i < loop.num_ops(); ++i) loop.run_op(i);
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
