// PipelineTrainer's step interface: feed() hands mini-batches to a segment running on its own
// thread; flush() ends that segment.
#include <algorithm>

#include "stalepipe/api/pipeline_trainer.h"
#include "trainer_impl.h"
#include "trainer_workers_impl.h"

namespace stalepipe {

void PipelineTrainer::start_segment() {
  Feeder& f = *feeder_;
  int64_t end = progress_.next_step + options_.pipeline().segment_steps();
  if (info().hybrid_switch_step > progress_.next_step) end = std::min(end, info().hybrid_switch_step);
  f.inputs.clear();
  f.end_of_input = f.aborted = f.done = false;
  f.error = nullptr;
  f.segment_end = end;
  exec::SegmentContext context;
  context.input = [&f](int64_t) {
    std::unique_lock<std::mutex> lock(f.mutex);
    f.changed.wait(lock, [&f] { return !f.inputs.empty() || f.end_of_input || f.aborted; });
    if (f.aborted || f.inputs.empty()) return exec::Input{};  // ends the segment here
    exec::Input in = std::move(f.inputs.front());
    f.inputs.pop_front();
    return in;
  };
  context.on_step = [&f](int64_t t, const StepLoss& s) {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.losses[t] = s;
    f.changed.notify_all();
  };
  context.on_abort = [&f] {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.aborted = true;
    f.changed.notify_all();
  };
  const int64_t first = progress_.next_step;
  check_segment(first, end);
  // The segment's outcome reaches the trainer only through f: join_segment records it on the
  // caller's thread.
  f.thread = std::thread([this, &f, first, end, context] {
    std::exception_ptr error;
    detail::SegmentRun run;
    try {
      run = workers_->execute(first, end, context, options_, lr_);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(f.mutex);
    f.error = error;
    f.run = std::move(run);
    f.done = true;
    f.changed.notify_all();
  });
}

void PipelineTrainer::join_segment() {
  Feeder& f = *feeder_;
  if (!f.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.end_of_input = true;
    f.changed.notify_all();
  }
  f.thread.join();  // f is the caller's again
  if (f.error) {
    f.losses.clear();  // of the failed run: a load() and a new run must not return them
    fail(f.error);
  }
  record_segment(f.run);
}

std::optional<StepLoss> PipelineTrainer::feed(torch::Tensor x, torch::Tensor y) {
  SP_CHECK_ARG(!finished_, "feed: the trainer was finished (finish() was called); no more mini-batches");
  check_usable("feed");
  SP_CHECK_ARG(options_.pipeline().executor() != ExecutorKind::kProcesses,
               "feed: with the processes executor every rank runs the same segments; use fit()");
  SP_CHECK_ARG(x.defined() && y.defined() && x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0),
               "feed: x and y must be tensors with the same batch size, got ",
               x.defined() ? c10::str(x.sizes()) : "undefined", " and ",
               y.defined() ? c10::str(y.sizes()) : "undefined");
  Feeder& f = *feeder_;
  if (f.thread.joinable() && progress_.next_step >= f.segment_end) join_segment();  // ended by itself
  if (!f.thread.joinable()) start_segment();
  // Partition 1's stream reads x after what the caller's stream wrote into it.
  exec::Input in{std::move(x), std::move(y)};
  in.ready = exec::current_stream(in.x.device())->record();
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.inputs.push_back(std::move(in));
    f.changed.notify_all();
  }
  ++progress_.next_step;
  if (progress_.next_step - progress_.returned <= info().lag) return std::nullopt;
  const int64_t want = progress_.returned;
  std::unique_lock<std::mutex> lock(f.mutex);
  f.changed.wait(lock, [&] { return f.losses.count(want) || f.done; });
  auto it = f.losses.find(want);
  if (it == f.losses.end()) {
    lock.unlock();
    join_segment();  // rethrows the worker's error
    SP_CHECK(false, "feed: the loss of mini-batch ", want, " never came out of the pipeline");
  }
  const StepLoss loss = it->second;
  f.losses.erase(it);
  ++progress_.returned;
  return loss;
}

std::vector<StepLoss> PipelineTrainer::flush() {
  join_segment();
  check_usable("flush");  // feed() reported the failure; its mini-batches never come out
  Feeder& f = *feeder_;
  std::vector<StepLoss> out;
  std::lock_guard<std::mutex> lock(f.mutex);
  for (; progress_.returned < progress_.next_step; ++progress_.returned) {
    auto it = f.losses.find(progress_.returned);
    SP_CHECK(it != f.losses.end(), "flush: the loss of mini-batch ", progress_.returned,
             " never came out of the pipeline");
    out.push_back(it->second);
    f.losses.erase(it);
  }
  return out;
}

std::vector<StepLoss> PipelineTrainer::finish() {
  if (finished_) return {};
  finished_ = true;
  return flush();
}

}  // namespace stalepipe
