#include "worker_impl.h"

#include <ATen/Parallel.h>
#include <chrono>
#include <cmath>

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
      forward(op.step, op.micro);
      break;
    case schedule::OpKind::kBackward:
      backward(op.step, op.micro);
      break;
    case schedule::OpKind::kUpdate:
      stage_.update(op.step, context_.lr(op.step));
      break;
  }
}

Message WorkerLoop::next_input(int64_t step, int micro) {
  Message in;
  in.step = step;
  in.micro = micro;
  if (worker_ != 0) {
    in = links_.recv_activation(worker_);
    SP_CHECK(in.step == step && in.micro == micro, "pipeline register out of order: expected ",
             schedule::to_string({schedule::OpKind::kForward, step, micro}), ", received ",
             schedule::to_string({schedule::OpKind::kForward, in.step, in.micro}));
    return in;
  }
  if (micro == 0) {
    if (context_.stop && context_.stop->load()) {
      in.stop = true;
      return in;
    }
    Input batch = context_.input(step);
    if (!batch.x.defined()) {  // the input ran out: as if stopped before this step
      in.stop = true;
      return in;
    }
    batch_samples_ = batch.x.size(0);
    const int M = schedule_.micro_batches;
    SP_CHECK(batch_samples_ >= M, "mini-batch ", step, " has ", batch_samples_,
             " samples, fewer than its ", M, " micro-batches");
    if (M == 1) {
      micro_x_ = {std::move(batch.x)};
      micro_target_ = {std::move(batch.target)};
    } else {
      micro_x_ = torch::tensor_split(batch.x, M);
      micro_target_ = torch::tensor_split(batch.target, M);
    }
  }
  in.tensor = std::move(micro_x_[micro]);
  in.target = std::move(micro_target_[micro]);
  in.batch_samples = batch_samples_;
  return in;
}

void WorkerLoop::forward(int64_t step, int micro) {
  const bool last = worker_ == schedule_.num_workers - 1;
  Message in = next_input(step, micro);
  input_arrived();
  if (in.stop) {
    cutoff_ = step;
    if (!last) links_.send_activation(worker_, std::move(in));
    return;
  }
  if (last) {
    const double share = static_cast<double>(in.target.size(0)) / static_cast<double>(in.batch_samples);
    const StepLoss loss = stage_.forward_loss(step, in.tensor, in.target, micro, share);
    // Costs nothing: the loss is on the host already. Stops the run at the first bad step.
    if (!std::isfinite(loss.loss)) {
      throw DivergedError(c10::str("training loss is ", loss.loss));
    }
    if (micro == 0) step_loss_ = StepLoss();
    step_loss_.loss += loss.loss * static_cast<double>(loss.samples);
    step_loss_.correct += loss.correct;
    step_loss_.scored += loss.scored;
    step_loss_.samples += loss.samples;
    if (micro == schedule_.micro_batches - 1 && context_.on_step) {
      StepLoss total = step_loss_;
      total.step = step;
      total.loss /= static_cast<double>(total.samples);
      context_.on_step(step, total);
    }
    return;
  }
  Message out;
  out.step = step;
  out.micro = micro;
  out.tensor = stage_.forward(step, in.tensor, micro);
  out.target = std::move(in.target);
  out.batch_samples = in.batch_samples;
  links_.send_activation(worker_, std::move(out));
}

void WorkerLoop::backward(int64_t step, int micro) {
  torch::Tensor grad_output;
  if (worker_ != schedule_.num_workers - 1) {
    Message in = links_.recv_gradient(worker_);
    SP_CHECK(in.step == step && in.micro == micro, "gradient out of order: expected ",
             schedule::to_string({schedule::OpKind::kBackward, step, micro}), ", received ",
             schedule::to_string({schedule::OpKind::kBackward, in.step, in.micro}));
    grad_output = std::move(in.tensor);
    input_arrived();
  }
  torch::Tensor grad_input = stage_.backward(step, grad_output, micro);
  if (worker_ != 0) {
    Message out;
    out.step = step;
    out.micro = micro;
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
  } catch (const DivergedError& e) {
    throw DivergedError(where + e.what());
  } catch (const c10::Error& e) {
    throw RuntimeError(where + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw RuntimeError(where + e.what());
  }
}

}  // namespace stalepipe::exec::detail
