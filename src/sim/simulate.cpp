#include "stalepipe/sim/simulate.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>

#include "stalepipe/common/error.h"
#include "stalepipe/common/slices.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::sim {
namespace {

template <typename T>
T at_or(const std::vector<T>& v, size_t i, T fallback) {
  return i < v.size() ? v[i] : fallback;
}

// Per partition, the bytes of the skip tensors it receives (per mini-batch).
std::vector<int64_t> skip_bytes_in(const partition::Profile& profile, const partition::Plan& plan) {
  std::vector<int64_t> bytes(plan.unit_ranges.size(), 0);
  for (const auto& skip : plan.skips) bytes[skip.to] += partition::stash_bytes(profile, skip.name);
  return bytes;
}

}  // namespace

PartitionCosts partition_costs(const partition::Profile& profile, const partition::Plan& plan) {
  PartitionCosts costs;
  const std::vector<int64_t> skips_in = skip_bytes_in(profile, plan);
  for (const auto& [first, last] : plan.unit_ranges) {
    SP_CHECK_ARG(last <= profile.units.size(), "profile of ", profile.model, " has ",
                 profile.units.size(), " units; the pipeline needs ", last);
    double f = 0, b = 0;
    const size_t k = costs.forward_seconds.size();
    int64_t kept = (first == 0 ? profile.input_bytes : profile.units[first - 1].output_bytes) + skips_in[k];
    int64_t params = 0, recomputed = 0;
    for (size_t u = first; u < last; ++u) {
      const auto& unit = profile.units[u];
      f += unit.forward_ms;
      b += unit.backward_ms_with(u < plan.recompute_units);
      kept += unit.kept_bytes;
      params += unit.parameter_bytes;
      if (u < plan.recompute_units) {
        recomputed += unit.kept_bytes - (u + 1 == plan.recompute_units || u + 1 == last ? unit.output_bytes : 0);
      }
    }
    costs.forward_seconds.push_back(f / 1e3);
    costs.backward_seconds.push_back(b / 1e3);
    costs.activation_bytes.push_back(kept);
    costs.parameter_bytes.push_back(params);
    costs.recomputed_bytes.push_back(recomputed);
    costs.output_bytes.push_back((last > first ? profile.units[last - 1].output_bytes : kept) +
                                 (k + 1 < skips_in.size() ? skips_in[k + 1] : 0));
  }
  return costs;
}

namespace {

void check_inputs(int K, const PartitionCosts& costs, const SimulateOptions& options) {
  SP_CHECK_ARG(static_cast<int>(costs.forward_seconds.size()) == K &&
                   static_cast<int>(costs.backward_seconds.size()) == K,
               "simulate: the schedule has ", K, " workers but ", costs.forward_seconds.size(),
               " forward and ", costs.backward_seconds.size(), " backward times were given");
  for (int k = 0; k < K; ++k) {
    SP_CHECK_ARG(costs.forward_seconds[k] >= 0 && costs.backward_seconds[k] >= 0 &&
                     at_or(costs.update_seconds, k, 0.0) >= 0,
                 "simulate: partition ", k + 1, " has a negative time");
  }
  for (const LinkModel* link : {&options.link, &options.replica_link}) {
    SP_CHECK_ARG(link->latency_seconds >= 0 && link->bandwidth_bytes_per_second >= 0, "simulate: link ",
                 link->describe(), " has a negative latency or bandwidth");
  }
  SP_CHECK_ARG(options.replicas >= 1, "simulate: replicas must be >= 1, got ", options.replicas);
}

// Replays the schedule: each op starts once its worker is free and its message has arrived.
class Replay {
 public:
  Replay(const schedule::Schedule& s, const PartitionCosts& costs, const SimulateOptions& options, Prediction& p)
      : s_(s), costs_(costs), options_(options), p_(p), K_(s.num_workers), forward_done_(K_),
        backward_done_(K_), next_(K_, 0), free_at_(K_, 0.0), share_(1.0 / s.micro_batches),
        link_free_(K_, {0.0, 0.0}), last_backward_(K_), replica_link_free_(K_, 0.0) {}

  // Runs every op; returns the completion time of each step (the end of its last op).
  std::map<int64_t, double> run() {
    size_t remaining = 0;
    for (const auto& ops : s_.worker_ops) remaining += ops.size();
    while (remaining > 0) {
      bool progressed = false;
      for (int k = 0; k < K_; ++k) {
        while (next_[k] < s_.worker_ops[k].size() && run_next(k)) {
          --remaining;
          progressed = true;
        }
      }
      SP_CHECK(progressed, "simulate: the schedule deadlocks (no worker can proceed)");
    }
    return completion_;
  }

 private:
  using Slot = std::pair<int64_t, int>;

  // Runs worker k's next op if its input has arrived.
  bool run_next(int k) {
    const schedule::Op& op = s_.worker_ops[k][next_[k]];
    double ready = 0, duration = 0;
    if (op.kind == schedule::OpKind::kForward) {
      if (k > 0 && !arrived(forward_done_[k - 1], op, k - 1, 0, ready)) return false;
      duration = costs_.forward_seconds[k] * share_;
    } else if (op.kind == schedule::OpKind::kBackward) {
      if (k < K_ - 1 && !arrived(backward_done_[k + 1], op, k, 1, ready)) return false;
      duration = costs_.backward_seconds[k] * share_;
    } else {
      duration = at_or(costs_.update_seconds, k, 0.0);
      if (options_.replicas > 1) ready = gradient_sum(k, op);
    }
    OpEvent e;
    e.worker = k;
    e.op = op;
    e.start_seconds = std::max(free_at_[k], ready);
    e.end_seconds = e.start_seconds + duration;
    free_at_[k] = e.end_seconds;
    if (op.kind == schedule::OpKind::kForward) forward_done_[k][{op.step, op.micro}] = e.end_seconds;
    if (op.kind == schedule::OpKind::kBackward) {
      backward_done_[k][{op.step, op.micro}] = e.end_seconds;
      last_backward_[k][op.step] = {e.start_seconds, e.end_seconds};
    }
    double& c = completion_[op.step];
    c = std::max(c, e.end_seconds);
    p_.workers[k].busy_seconds += duration;
    p_.events.push_back(e);
    ++next_[k];
    return true;
  }

  // Whether the neighbour sent op's message over the register after partition `boundary`
  // (direction 0 forward, 1 backward); sets `ready` to its arrival. Messages are consumed in
  // the order they were sent (the registers are FIFO), so the link's direction is free again
  // when this one arrives.
  bool arrived(const std::map<Slot, double>& done, const schedule::Op& op, int boundary, int direction,
               double& ready) {
    const auto it = done.find({op.step, op.micro});
    if (it == done.end()) return false;
    const auto bytes = static_cast<int64_t>(at_or(costs_.output_bytes, boundary, int64_t{0}) * share_);
    double& free = link_free_[boundary][direction];
    ready = std::max(it->second, free) + options_.link.message_seconds(bytes);
    free = ready;
    return true;
  }

  // Replicas: when the sum of op.step's gradient ends on worker k (the event of its exposed
  // part is recorded); the update waits for it.
  double gradient_sum(int k, const schedule::Op& op) {
    const auto [b_start, b_end] = last_backward_[k].at(op.step);
    last_backward_[k].erase(op.step);
    const int64_t bytes = at_or(costs_.parameter_bytes, k, int64_t{0});
    auto transfer = [&](int64_t n) {
      return (options_.replicas - 1) * options_.replica_link.message_seconds(n);
    };
    double& link = replica_link_free_[k];
    const double start = std::max(b_start, link);
    const double end = std::max(start + transfer(bytes), b_end + transfer(std::min(bytes, kGradientBucketBytes)));
    link = end;
    const double exposed_from = std::max(b_end, free_at_[k]);
    if (end > exposed_from) p_.events.push_back(OpEvent{k, op, exposed_from, end, /*sum=*/true});
    return end;
  }

  const schedule::Schedule& s_;
  const PartitionCosts& costs_;
  const SimulateOptions& options_;
  Prediction& p_;
  const int K_;
  // Message arrival times: forward_done_[k][(t, micro)], backward_done_[k][(t, micro)]. A
  // micro-batch costs its share of the mini-batch's time.
  std::vector<std::map<Slot, double>> forward_done_, backward_done_;
  std::vector<size_t> next_;
  std::vector<double> free_at_;
  const double share_;
  std::vector<std::array<double, 2>> link_free_;  // [boundary][direction]: busy until
  std::map<int64_t, double> completion_;
  std::vector<std::map<int64_t, std::pair<double, double>>> last_backward_;  // [k][step]: its span
  std::vector<double> replica_link_free_;  // [k]: the replicas' link busy until
};

// Makespan, the steady state (fill and drain cut, as bench measures it) and the rates.
void fill_rates(const schedule::Schedule& schedule, const SimulateOptions& options,
                std::map<int64_t, double>& completion, Prediction& p) {
  const int K = schedule.num_workers;
  double first = 0, last = 0;
  for (const auto& e : p.events) last = std::max(last, e.end_seconds);
  p.makespan_seconds = last - first;
  const int64_t steps = schedule.end_step - schedule.first_step;
  const int64_t lo = schedule.first_step + 2 * K;
  int64_t hi = schedule.end_step - 1 - 2 * K;
  // Whole cycles only: partition 1's backward of t comes just before its forward of
  // t + 2(K-1), so completions may repeat in a pattern of 2(K-1) steps (K = 2 with a slow
  // link: 2.0, 4.5, 2.0, ...), which an odd count would over-weight.
  const int64_t cycle = std::max(1, 2 * (K - 1));
  if (hi - lo >= cycle) hi -= (hi - lo) % cycle;
  if (steps >= 4 * K + 4 && hi > lo) {
    p.steady_step_seconds = (completion[hi] - completion[lo]) / static_cast<double>(hi - lo);
  } else if (steps > 0) {
    p.steady_step_seconds = p.makespan_seconds / static_cast<double>(steps);
  }
  const double batch = static_cast<double>(options.batch_size);
  if (p.steady_step_seconds > 0) p.steady_images_per_second = batch / p.steady_step_seconds;
  if (p.makespan_seconds > 0) p.images_per_second = batch * steps / p.makespan_seconds;
}

}  // namespace

Prediction simulate(const schedule::Schedule& schedule, const PartitionCosts& costs,
                    const SimulateOptions& options) {
  const int K = schedule.num_workers;
  check_inputs(K, costs, options);
  Prediction p;
  p.workers.resize(K);
  auto completion = Replay(schedule, costs, options, p).run();
  fill_rates(schedule, options, completion, p);

  const auto stats = schedule::analyze(schedule);
  for (int k = 0; k < K; ++k) {
    auto& w = p.workers[k];
    if (p.makespan_seconds > 0) w.bubble_fraction = 1 - w.busy_seconds / p.makespan_seconds;
    const double per_step = costs.forward_seconds[k] + costs.backward_seconds[k] +
                            at_or(costs.update_seconds, k, 0.0);
    if (p.steady_step_seconds > 0) w.steady_bubble_fraction = 1 - per_step / p.steady_step_seconds;
    w.max_in_flight = stats.workers[k].max_in_flight;
    w.activation_bytes = w.max_in_flight * at_or(costs.activation_bytes, k, int64_t{0});
    w.weight_bytes = at_or(costs.parameter_bytes, k, int64_t{0});
    w.optimizer_bytes = w.weight_bytes * (options.momentum ? 2 : 1);
  }
  return p;
}

std::string format_prediction(const Prediction& p, const PartitionCosts& costs) {
  std::string out = c10::str("predicted: ", static_cast<int64_t>(p.steady_images_per_second + 0.5),
                             " images/s in steady state (one mini-batch every ",
                             p.steady_step_seconds * 1e3, " ms); ",
                             static_cast<int64_t>(p.images_per_second + 0.5),
                             " images/s over the whole segment (", p.makespan_seconds * 1e3,
                             " ms, fill and drain included)\n");
  char line[256];
  std::snprintf(line, sizeof line, "%6s %9s %9s %9s %8s %13s %9s %10s %10s %10s\n", "worker",
                "fwd ms", "bwd ms", "busy ms", "bubble", "steady bubble", "in flight", "act MB",
                "weights MB", "memory MB");
  out += line;
  for (size_t k = 0; k < p.workers.size(); ++k) {
    const auto& w = p.workers[k];
    std::snprintf(line, sizeof line, "%6zu %9.3f %9.3f %9.1f %7.1f%% %12.1f%% %9d %10.2f %10.2f %10.2f\n",
                  k + 1, costs.forward_seconds[k] * 1e3, costs.backward_seconds[k] * 1e3,
                  w.busy_seconds * 1e3, 100 * w.bubble_fraction, 100 * w.steady_bubble_fraction,
                  w.max_in_flight, w.activation_bytes / 1e6, w.weight_bytes / 1e6,
                  w.memory_bytes() / 1e6);
    out += line;
  }
  return out;
}

}  // namespace stalepipe::sim
