#include "worker_impl.h"

#include <ATen/Parallel.h>
#include <chrono>

#include <c10/util/Exception.h>

namespace stalepipe::exec::detail {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void WorkerLoop::run_op(size_t i) {
  const schedule::Op& op = schedule_.worker_ops[worker_][i];
  if (!context_.on_op) {
    execute(op);
    return;
  }
  op_start_ = steady_seconds();
  execute(op);
  // A forward that met the stop marker lowered the cutoff to its own step: it did no work.
  if (op.step < cutoff_) context_.on_op(worker_, op, op_start_, steady_seconds());
}

void WorkerLoop::input_arrived() {
  // A trace shows compute, not the wait for a neighbour's message or the data.
  if (context_.on_op) op_start_ = steady_seconds();
}

void WorkerLoop::execute(const schedule::Op& op) {
  current_step_ = op.step;
  if (op.step >= cutoff_) return;  // stopped: this mini-batch never entered the pipeline
  switch (op.kind) {
    case schedule::OpKind::kForward:
      forward(op.step);
      break;
    case schedule::OpKind::kBackward:
      backward(op.step);
      break;
    case schedule::OpKind::kUpdate:
      stage_.update(context_.lr(op.step));
      break;
  }
}

void WorkerLoop::forward(int64_t step) {
  const bool last = worker_ == schedule_.num_workers - 1;
  Message in;
  if (worker_ == 0) {
    if (context_.stop && context_.stop->load()) {
      in.step = step;
      in.stop = true;
    } else {
      Input batch = context_.input(step);
      in.step = step;
      in.stop = !batch.x.defined();  // the input ran out: as if stopped before this step
      in.tensor = std::move(batch.x);
      in.labels = std::move(batch.labels);
    }
  } else {
    in = links_.recv_activation(worker_);
    SP_CHECK(in.step == step, "pipeline register out of order: expected mini-batch ", step,
             ", received ", in.step);
  }
  input_arrived();
  if (in.stop) {
    cutoff_ = step;
    if (!last) links_.send_activation(worker_, std::move(in));
    return;
  }
  if (last) {
    const StepLoss loss = stage_.forward_loss(step, in.tensor, in.labels);
    if (context_.on_step) context_.on_step(step, loss);
    return;
  }
  Message out;
  out.step = step;
  out.tensor = stage_.forward(step, in.tensor);
  out.labels = std::move(in.labels);
  links_.send_activation(worker_, std::move(out));
}

void WorkerLoop::backward(int64_t step) {
  torch::Tensor grad_output;
  if (worker_ != schedule_.num_workers - 1) {
    Message in = links_.recv_gradient(worker_);
    SP_CHECK(in.step == step, "gradient out of order: expected mini-batch ", step, ", received ",
             in.step);
    grad_output = std::move(in.tensor);
    input_arrived();
  }
  torch::Tensor grad_input = stage_.backward(step, grad_output);
  if (worker_ != 0) {
    Message out;
    out.step = step;
    out.tensor = std::move(grad_input);
    links_.send_gradient(worker_, std::move(out));
  }
}

void use_worker_threads(const SegmentContext& context, int worker) {
  if (worker < static_cast<int>(context.threads_per_worker.size()) &&
      context.threads_per_worker[worker] > 0) {
    at::set_num_threads(context.threads_per_worker[worker]);
  }
}

void check_stages(const schedule::Schedule& schedule, const std::vector<Stage*>& stages) {
  SP_CHECK(static_cast<int>(stages.size()) == schedule.num_workers, "schedule has ",
           schedule.num_workers, " workers but there are ", stages.size(), " partitions");
}

void rethrow_with_context(std::exception_ptr error, int worker, int64_t step) {
  const std::string where =
      c10::str("partition ", worker + 1, ", mini-batch ", step, ": ");
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    throw UsageError(where + e.what());
  } catch (const c10::Error& e) {
    throw RuntimeError(where + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw RuntimeError(where + e.what());
  }
}

}  // namespace stalepipe::exec::detail
