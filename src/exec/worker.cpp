#include "worker_impl.h"

#include <ATen/Parallel.h>
#include <chrono>
#include <algorithm>
#include <cmath>
#include <utility>

#include <c10/util/Exception.h>

namespace stalepipe::exec::detail {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

WorkerLoop::WorkerLoop(const schedule::Schedule& schedule, const Wiring& wiring, int worker,
                       Stage& stage, Links& links, const SegmentContext& context)
    : schedule_(schedule), worker_(worker), stage_(stage), links_(links), context_(context),
      cutoff_(schedule.end_step) {
  const int K = schedule.num_workers;
  if (worker > 0) {
    activation_in_ = &wiring.find(worker - 1, worker, Lane::kActivation);
    gradient_out_ = &wiring.find(worker, worker - 1, Lane::kGradient);
  }
  if (worker + 1 < K) {
    activation_out_ = &wiring.find(worker, worker + 1, Lane::kActivation);
    gradient_in_ = &wiring.find(worker + 1, worker, Lane::kGradient);
  }
  stage_.begin_segment(schedule, context.lr);
  stage_.stream().join_current();
}

void WorkerLoop::run_all() {
  for (size_t i = 0; i < num_ops(); ++i) run_op(i);
  finish();
}

void WorkerLoop::finish() {
  const auto on_stream = stage_.stream().enter();
  read_losses();
  stage_.stream().synchronize();
}

Message WorkerLoop::receive(const Route* route) {
  Message m = links_.recv(*route);
  DeviceStream& stream = stage_.stream();
  stream.wait(m.ready.get());
  for (const auto& entry : m.tensors) stream.hold(entry.second);
  return m;
}

void WorkerLoop::send(const Route* route, Message message) {
  if (!message.stop && !message.has_names(route->names)) Wiring::check_names(*route, message.names());
  message.ready = stage_.stream().record();
  links_.send(*route, std::move(message));
}

void WorkerLoop::run_op(size_t i) {
  const schedule::Op& op = schedule_.worker_ops[worker_][i];
  const auto on_stream = stage_.stream().enter();
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
    in = receive(activation_in_);
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
  in.put(kActivation, std::move(micro_x_[micro]));
  in.put(kTarget, std::move(micro_target_[micro]));
  in.batch_samples = batch_samples_;
  return in;
}

void WorkerLoop::forward(int64_t step, int micro) {
  const bool last = worker_ == schedule_.num_workers - 1;
  Message in = next_input(step, micro);
  input_arrived();
  if (in.stop) {
    cutoff_ = step;
    if (!last) send(activation_out_, std::move(in));
    return;
  }
  if (last) {
    const torch::Tensor& target = in.at(kTarget);
    const double share = static_cast<double>(target.size(0)) / static_cast<double>(in.batch_samples);
    losses_.push_back(stage_.forward_loss(step, in.at(kActivation), target, micro, share));
    loss_steps_.push_back(step);
    const int64_t every = std::max<int64_t>(1, context_.read_losses_every);
    if (micro == schedule_.micro_batches - 1 &&
        static_cast<int64_t>(losses_.size()) >= every * schedule_.micro_batches) {
      read_losses();
    }
    return;
  }
  Message out;
  out.step = step;
  out.micro = micro;
  out.put(kActivation, stage_.forward(step, in.at(kActivation), micro));
  out.put(kTarget, std::move(in.at(kTarget)));
  out.batch_samples = in.batch_samples;
  send(activation_out_, std::move(out));
}

void WorkerLoop::backward(int64_t step, int micro) {
  torch::Tensor grad_output;
  if (worker_ != schedule_.num_workers - 1) {
    Message in = receive(gradient_in_);
    SP_CHECK(in.step == step && in.micro == micro, "gradient out of order: expected ",
             schedule::to_string({schedule::OpKind::kBackward, step, micro}), ", received ",
             schedule::to_string({schedule::OpKind::kBackward, in.step, in.micro}));
    grad_output = std::move(in.at(kGradient));
    input_arrived();
  }
  torch::Tensor grad_input = stage_.backward(step, grad_output, micro);
  if (worker_ != 0) {
    Message out;
    out.step = step;
    out.micro = micro;
    out.put(kGradient, std::move(grad_input));
    send(gradient_out_, std::move(out));
  }
}

void WorkerLoop::read_losses() {
  if (losses_.empty()) return;
  // Taken out first, so that a throw below leaves none behind.
  const std::vector<PendingLoss> losses = std::exchange(losses_, {});
  const std::vector<int64_t> steps = std::exchange(loss_steps_, {});
  std::vector<torch::Tensor> values, counts;
  for (const PendingLoss& l : losses) {
    values.push_back(l.loss.reshape({}));
    if (l.score.correct_count.defined()) counts.push_back(l.score.correct_count.reshape({}));
  }
  // One copy each from the device; float to double is exact, as item<double>() was.
  const torch::Tensor loss = torch::stack(values).to(torch::kDouble).cpu();
  const torch::Tensor count = counts.empty() ? torch::Tensor() : torch::stack(counts).to(torch::kLong).cpu();
  const double* loss_at = loss.data_ptr<double>();
  const int64_t* count_at = counts.empty() ? nullptr : count.data_ptr<int64_t>();
  StepLoss total;
  size_t next_count = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const PendingLoss& l = losses[i];
    if (!std::isfinite(loss_at[i])) {
      current_step_ = steps[i];  // the step the error names
      throw DivergedError(c10::str("training loss is ", loss_at[i]));
    }
    if (i == 0 || steps[i] != steps[i - 1]) total = StepLoss();
    total.loss += loss_at[i] * static_cast<double>(l.samples);
    total.correct += l.score.correct_count.defined() ? count_at[next_count++] : l.score.correct;
    total.scored += l.score.scored;
    total.samples += l.samples;
    const bool step_ends = i + 1 == losses.size() || steps[i + 1] != steps[i];
    if (step_ends && context_.on_step) {
      StepLoss report = total;
      report.step = steps[i];
      report.loss /= static_cast<double>(report.samples);
      context_.on_step(report.step, report);
    }
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
