#include "worker_impl.h"

#include "replicas_impl.h"

#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <utility>

#include <c10/util/Exception.h>

#include "stalepipe/common/clock.h"

namespace stalepipe::exec::detail {
namespace {

const WorkerLoopOptions& checked(const WorkerLoopOptions& o) {
  SP_CHECK(o.schedule() && o.wiring() && o.stage() && o.links() && o.context(),
           "WorkerLoopOptions: schedule, wiring, stage, links and context must be set");
  return o;
}

}  // namespace

WorkerLoop::WorkerLoop(const WorkerLoopOptions& o)
    : schedule_(*checked(o).schedule()), worker_(o.worker()), stage_(*o.stage()), links_(*o.links()), context_(*o.context()),
      peers_(o.peers()), cutoff_(o.schedule()->end_step) {
  const schedule::Schedule& schedule = schedule_;
  const SegmentContext& context = context_;
  const int worker = worker_;
  const Wiring& wiring = *o.wiring();
  for (const Route& r : wiring.routes()) {
    const bool forward = r.lane == Lane::kActivation;
    if (r.destination == worker && forward) {
      (r.source == worker - 1 ? activation_in_ : skips_in_.emplace_back()) = &r;
    } else if (r.source == worker && forward) {
      (r.destination == worker + 1 ? activation_out_ : skips_out_.emplace_back()) = &r;
    } else if (r.destination == worker) {
      gradients_in_.push_back(&r);
    } else if (r.source == worker) {
      gradients_out_.push_back(&r);
    }
  }
  SP_CHECK((worker == 0) == !activation_in_ && (worker + 1 == schedule.num_workers) == !activation_out_,
           "pipeline wiring: worker ", worker + 1, " of ", schedule.num_workers, " is not in the chain");
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
      if (peers_) peers_->reduce_gradients();
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
    DeviceStream& stream = stage_.stream();  // a batch copied ahead on another stream
    stream.wait(batch.ready.get());
    stream.hold(batch.x);
    stream.hold(batch.target);
    batch_samples_ = batch.batch_samples > 0 ? batch.batch_samples : batch.x.size(0);
    const int M = schedule_.micro_batches;
    SP_CHECK(batch.x.size(0) >= M, "mini-batch ", step, " has ", batch.x.size(0),
             " samples here, fewer than its ", M, " micro-batches");
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

void WorkerLoop::receive_all(const std::vector<const Route*>& routes, const schedule::Op& op, Message& into) {
  for (const Route* route : routes) {
    Message in = receive(route);
    SP_CHECK(in.step == op.step && in.micro == op.micro, "message from partition ", route->source + 1,
             " out of order: expected ", schedule::to_string(op), ", received ",
             schedule::to_string({op.kind, in.step, in.micro}));
    for (auto& entry : in.tensors) into.tensors.push_back(std::move(entry));
  }
}

void WorkerLoop::send_all(const std::vector<const Route*>& routes, Message& all) {
  for (const Route* route : routes) {
    Message out;
    out.step = all.step;
    out.micro = all.micro;
    out.batch_samples = all.batch_samples;
    for (const std::string& name : route->names) out.put(name, all.at(name));
    send(route, std::move(out));
  }
}

void WorkerLoop::forward(int64_t step, int micro) {
  const bool last = worker_ == schedule_.num_workers - 1;
  Message in = next_input(step, micro);
  if (in.stop) {
    input_arrived();
    cutoff_ = step;
    if (!last) send(activation_out_, std::move(in));
    return;
  }
  receive_all(skips_in_, {schedule::OpKind::kForward, step, micro}, in);
  input_arrived();
  StageTensors x{in.at(kActivation), {}};
  for (const std::string& name : stage_.skip_inputs()) x.skips.push_back(in.at(name));
  if (last) {
    const torch::Tensor& target = in.at(kTarget);
    const double share = static_cast<double>(target.size(0)) / static_cast<double>(in.batch_samples);
    losses_.push_back(stage_.forward_loss(step, x, target, micro, share));
    loss_steps_.push_back(step);
    const int64_t every = std::max<int64_t>(1, context_.read_losses_every);
    if (micro == schedule_.micro_batches - 1 &&
        static_cast<int64_t>(losses_.size()) >= every * schedule_.micro_batches) {
      read_losses();
    }
    return;
  }
  StageTensors y = stage_.forward(step, x, micro);
  Message out;
  out.step = step;
  out.micro = micro;
  out.batch_samples = in.batch_samples;
  out.put(kActivation, std::move(y.main));
  out.put(kTarget, std::move(in.at(kTarget)));
  for (size_t i = 0; i < y.skips.size(); ++i) out.put(stage_.skip_outputs()[i], std::move(y.skips[i]));
  send_all(skips_out_, out);
  send_all({activation_out_}, out);
}

void WorkerLoop::backward(int64_t step, int micro) {
  Message in;
  receive_all(gradients_in_, {schedule::OpKind::kBackward, step, micro}, in);
  if (!gradients_in_.empty()) input_arrived();
  StageTensors grad_output;
  if (worker_ != schedule_.num_workers - 1) grad_output.main = std::move(in.at(kGradient));
  for (const std::string& name : stage_.skip_outputs()) grad_output.skips.push_back(std::move(in.at(name)));
  if (peers_) {
    const bool last = ++backwards_[step] == schedule_.micro_batches;
    if (last) backwards_.erase(step);
    peers_->backward_begins(last);
  }
  StageTensors grad_input = stage_.backward(step, grad_output, micro);
  Message out;
  out.step = step;
  out.micro = micro;
  if (worker_ != 0) out.put(kGradient, std::move(grad_input.main));
  for (size_t i = 0; i < grad_input.skips.size(); ++i) out.put(stage_.skip_inputs()[i], std::move(grad_input.skips[i]));
  send_all(gradients_out_, out);
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
    if (!step_ends) continue;
    StepLoss report = total;
    report.step = steps[i];
    report.loss /= static_cast<double>(report.samples);
    if (peers_) {  // this replica's slice: the whole mini-batch's loss comes out at one replica
      std::optional<StepLoss> whole = peers_->combine_loss(report);
      if (!whole) continue;
      report = *whole;
    }
    if (context_.on_step) context_.on_step(report.step, report);
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

void clear_in_flight(const std::vector<Stage*>& stages) {
  // A replica cancelled while another replica summed the gradients never waited for that sum,
  // whose copies into its gradients may still be queued on the summing replica's stream.
  for (Stage* s : stages) s->stream().synchronize();
  for (Stage* s : stages) s->clear_in_flight();
}

void rethrow_with_context(std::exception_ptr error, int worker, int64_t step, int replica) {
  const std::string where = c10::str(replica >= 0 ? c10::str("replica ", replica + 1, ", ") : std::string(),
                                     "partition ", worker + 1, ", mini-batch ", step, ": ");
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
