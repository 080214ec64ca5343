#include "stalepipe/schedule/schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "stalepipe/common/error.h"
#include "stalepipe/common/names.h"

namespace stalepipe::schedule {
namespace {

void check_range(int num_workers, int64_t first_step, int64_t end_step) {
  SP_CHECK_ARG(num_workers >= 1, "a schedule needs at least 1 worker, got ", num_workers);
  SP_CHECK_ARG(first_step >= 0 && end_step >= first_step, "schedule steps [", first_step, ", ",
               end_step, ") are not a valid range");
}

Schedule empty_schedule(ScheduleKind kind, int num_workers, int64_t first_step,
                        int64_t end_step) {
  check_range(num_workers, first_step, end_step);
  Schedule s;
  s.kind = kind;
  s.num_workers = num_workers;
  s.first_step = first_step;
  s.end_step = end_step;
  s.worker_ops.resize(num_workers);
  return s;
}

}  // namespace

Schedule make_sequential(int num_workers, int64_t first_step, int64_t end_step) {
  Schedule s = empty_schedule(ScheduleKind::kSequential, num_workers, first_step, end_step);
  for (auto& ops : s.worker_ops) {
    for (int64_t t = first_step; t < end_step; ++t) {
      ops.push_back({OpKind::kForward, t});
      ops.push_back({OpKind::kBackward, t});
      ops.push_back({OpKind::kUpdate, t});
    }
  }
  return s;
}

namespace {

// Worker k first runs lead(k) forwards, then per cycle one backward, its update and one
// forward, then drains: the shape PPL-SGD and 1F1B share; they differ in the lead.
template <typename Lead>
Schedule make_interleaved(ScheduleKind kind, int num_workers, int64_t first_step,
                          int64_t end_step, Lead lead_of) {
  Schedule s = empty_schedule(kind, num_workers, first_step, end_step);
  for (int k = 0; k < num_workers; ++k) {
    const int64_t lead = lead_of(k);
    auto& ops = s.worker_ops[k];
    int64_t next_forward = first_step;
    for (; next_forward < std::min(end_step, first_step + lead); ++next_forward) {
      ops.push_back({OpKind::kForward, next_forward});
    }
    for (int64_t t = first_step; t < end_step; ++t) {
      ops.push_back({OpKind::kBackward, t});
      ops.push_back({OpKind::kUpdate, t});
      if (next_forward < end_step) {
        ops.push_back({OpKind::kForward, next_forward++});
      }
    }
  }
  return s;
}

const std::pair<ScheduleKind, const char*> kScheduleNames[] = {
    {ScheduleKind::kStale, "stale"},     {ScheduleKind::kSequential, "sequential"},
    {ScheduleKind::kHybrid, "hybrid"},   {ScheduleKind::kGPipe, "gpipe"},
    {ScheduleKind::kOneFOneB, "1f1b-stash"},
};

// Position of a forward or backward among all (step, micro-batch) pairs of the segment.
int64_t op_slot(const Schedule& schedule, const Op& op) {
  return (op.step - schedule.first_step) * schedule.micro_batches + op.micro;
}

}  // namespace

Schedule make_stale(int num_workers, int64_t first_step, int64_t end_step) {
  // 2(K-1-k) forwards before the first backward in the paper's steady state, and at least 1
  // (the last worker runs F B U back to back).
  return make_interleaved(ScheduleKind::kStale, num_workers, first_step, end_step,
                          [&](int k) { return std::max(1, 2 * (num_workers - 1 - k)); });
}

Schedule make_one_f_one_b(int num_workers, int64_t first_step, int64_t end_step) {
  Schedule s = make_interleaved(ScheduleKind::kOneFOneB, num_workers, first_step, end_step,
                                [&](int k) { return num_workers - k; });
  s.stash_weights = true;
  return s;
}

Schedule make_gpipe(int num_workers, int64_t first_step, int64_t end_step, int micro_batches) {
  SP_CHECK_ARG(micro_batches >= 1, "gpipe: micro_batches must be >= 1, got ", micro_batches);
  Schedule s = empty_schedule(ScheduleKind::kGPipe, num_workers, first_step, end_step);
  s.micro_batches = micro_batches;
  for (auto& ops : s.worker_ops) {
    for (int64_t t = first_step; t < end_step; ++t) {
      for (int m = 0; m < micro_batches; ++m) ops.push_back({OpKind::kForward, t, m});
      for (int m = micro_batches - 1; m >= 0; --m) ops.push_back({OpKind::kBackward, t, m});
      ops.push_back({OpKind::kUpdate, t});
    }
  }
  return s;
}

Schedule make_schedule(ScheduleKind kind, int num_workers, int64_t first_step, int64_t end_step,
                       int micro_batches) {
  SP_CHECK_ARG(kind == ScheduleKind::kGPipe || micro_batches == 1, "micro_batches ",
               micro_batches, " applies to the gpipe schedule only, not ", to_string(kind));
  SP_CHECK_ARG(kind != ScheduleKind::kHybrid, "the hybrid schedule is stale then sequential; "
               "make the schedule of each side of the switch");
  switch (kind) {
    case ScheduleKind::kSequential:
      return make_sequential(num_workers, first_step, end_step);
    case ScheduleKind::kStale:
      return make_stale(num_workers, first_step, end_step);
    case ScheduleKind::kGPipe:
      return make_gpipe(num_workers, first_step, end_step, micro_batches);
    case ScheduleKind::kOneFOneB:
      return make_one_f_one_b(num_workers, first_step, end_step);
    case ScheduleKind::kHybrid:
      break;  // refused above
  }
  throw UsageError("unknown schedule kind");
}

ScheduleKind schedule_from_name(const std::string& name, const std::string& field) {
  return value_of(kScheduleNames, name, field);
}

std::string to_string(ScheduleKind kind) { return name_of(kScheduleNames, kind); }

std::string to_string(const Op& op) {
  const char* letter = op.kind == OpKind::kForward ? "F" : op.kind == OpKind::kBackward ? "B" : "U";
  std::string text = letter + std::to_string(op.step);
  if (op.micro > 0) text += "." + std::to_string(op.micro);
  return text;
}

std::vector<GlobalOp> global_order(const Schedule& schedule) {
  const int K = schedule.num_workers;
  std::vector<size_t> next(K, 0);
  // done_forward[k] / done_backward[k]: number of forwards/backwards worker k has finished.
  // Each worker runs its forwards (and backwards) in increasing step order, so "F(t) done on
  // worker k" is "the forward count on k has passed t".
  std::vector<std::vector<char>> forward_done(K), backward_done(K);
  const int64_t span = (schedule.end_step - schedule.first_step) * schedule.micro_batches;
  for (int k = 0; k < K; ++k) {
    forward_done[k].assign(span, 0);
    backward_done[k].assign(span, 0);
  }
  auto ready = [&](int k, const Op& op) {
    // An update needs all micro-batches' backwards; each worker runs micro 0's last.
    const int64_t i = op_slot(schedule, op);
    switch (op.kind) {
      case OpKind::kForward:
        return k == 0 || forward_done[k - 1][i];
      case OpKind::kBackward:
        return k == K - 1 ? bool(forward_done[k][i]) : bool(backward_done[k + 1][i]);
      case OpKind::kUpdate:
        return bool(backward_done[k][i]);
    }
    return false;
  };

  size_t total = 0;
  for (const auto& ops : schedule.worker_ops) total += ops.size();
  std::vector<GlobalOp> order;
  order.reserve(total);
  while (order.size() < total) {
    bool progressed = false;
    for (int k = 0; k < K; ++k) {
      const auto& ops = schedule.worker_ops[k];
      if (next[k] < ops.size() && ready(k, ops[next[k]])) {
        const Op op = ops[next[k]++];
        const int64_t i = op_slot(schedule, op);
        SP_CHECK(i >= 0 && i < span, "schedule op ", to_string(op), " of worker ", k,
                 " is outside the segment's steps");
        if (op.kind == OpKind::kForward) forward_done[k][i] = 1;
        if (op.kind == OpKind::kBackward) backward_done[k][i] = 1;
        order.push_back({k, op});
        progressed = true;
        break;  // restart from worker 0: lowest-numbered ready worker first
      }
    }
    SP_CHECK(progressed, "schedule deadlocks: no worker can run its next operation after ",
             order.size(), " of ", total, " operations");
  }
  return order;
}

ScheduleStats analyze(const Schedule& schedule) {
  ScheduleStats stats;
  stats.workers.resize(schedule.num_workers);
  const int M = schedule.micro_batches;
  for (int k = 0; k < schedule.num_workers; ++k) {
    auto& w = stats.workers[k];
    std::vector<int64_t> updated;  // steps whose update was applied (increasing)
    // In-flight micro-batches, and the weight version (updates applied) each forward used.
    std::map<std::pair<int64_t, int>, int64_t> in_flight;
    for (const Op& op : schedule.worker_ops[k]) {
      switch (op.kind) {
        case OpKind::kForward: {
          // Updates of earlier mini-batches of this segment not yet applied.
          const int64_t earlier = op.step - schedule.first_step;
          const int64_t applied =
              std::lower_bound(updated.begin(), updated.end(), op.step) - updated.begin();
          w.staleness = std::max<int>(w.staleness, static_cast<int>(earlier - applied));
          in_flight[{op.step, op.micro}] = static_cast<int64_t>(updated.size());
          w.max_in_flight =
              std::max(w.max_in_flight, static_cast<int>((in_flight.size() + M - 1) / M));
          if (schedule.stash_weights) {
            std::set<int64_t> versions{static_cast<int64_t>(updated.size())};  // current weights
            for (const auto& entry : in_flight) versions.insert(entry.second);
            w.max_weight_versions = std::max(w.max_weight_versions, static_cast<int>(versions.size()));
          }
          break;
        }
        case OpKind::kBackward:
          in_flight.erase({op.step, op.micro});
          break;
        case OpKind::kUpdate:
          updated.push_back(op.step);
          break;
      }
    }
  }
  return stats;
}

int max_skip_in_flight(const Schedule& schedule, int from, int to) {
  SP_CHECK_ARG(from >= 0 && from < to && to < schedule.num_workers, "skip from worker ", from + 1, " to worker ",
               to + 1, ": needs 1 <= from < to <= ", schedule.num_workers);
  std::set<std::pair<int64_t, int>> held;
  size_t most = 0;
  for (const auto& g : global_order(schedule)) {
    if (g.worker == from && g.op.kind == OpKind::kForward) {
      held.insert({g.op.step, g.op.micro});
      most = std::max(most, held.size());
    }
    if (g.worker == to && g.op.kind == OpKind::kBackward) held.erase({g.op.step, g.op.micro});
  }
  const int M = schedule.micro_batches;
  return static_cast<int>((static_cast<int>(most) + M - 1) / M);
}

std::vector<int> tally_staleness(const Schedule& schedule, int64_t end_step,
                                 const std::vector<int>& full_delay, StalenessTally& tally) {
  const size_t K = static_cast<size_t>(schedule.num_workers);
  SP_CHECK_ARG(full_delay.size() == K, "tally_staleness: ", full_delay.size(),
               " full delays for ", K, " workers");
  tally.max_delay.resize(K, 0);
  tally.forwards.resize(K, 0);
  tally.forwards_at_full.resize(K, 0);
  std::vector<int> segment(K, 0);
  for (size_t k = 0; k < K; ++k) {
    int64_t applied = 0;  // every worker applies its updates in step order
    for (const Op& op : schedule.worker_ops[k]) {
      if (op.kind == OpKind::kUpdate) ++applied;
      if (op.kind != OpKind::kForward || op.micro != 0 || op.step >= end_step) continue;
      const int delay = static_cast<int>(op.step - schedule.first_step - applied);
      segment[k] = std::max(segment[k], delay);
      ++tally.forwards[k];
      if (delay >= full_delay[k]) ++tally.forwards_at_full[k];
    }
    tally.max_delay[k] = std::max(tally.max_delay[k], segment[k]);
  }
  return segment;
}

std::string format_schedule_table(const Schedule& schedule, int max_rows) {
  // Space-time view: every forward and backward takes one time slot, an update shares the
  // slot of its backward, and a worker runs its next operation as soon as its input arrived
  // in an earlier slot. This is the paper's pipeline diagram for equal-cost partitions.
  const int K = schedule.num_workers;
  const int64_t span = (schedule.end_step - schedule.first_step) * schedule.micro_batches;
  std::vector<size_t> next(K, 0);
  std::vector<std::vector<int64_t>> forward_slot(K, std::vector<int64_t>(span, -1));
  std::vector<std::vector<int64_t>> backward_slot(K, std::vector<int64_t>(span, -1));
  auto done_before = [](int64_t slot, int64_t now) { return slot >= 0 && slot < now; };
  std::ostringstream out;
  out << "time";
  for (int k = 0; k < K; ++k) out << "\tworker " << k + 1;
  out << "\n";
  int64_t now = 0;
  int rows = 0;
  auto finished = [&] {
    for (int k = 0; k < K; ++k) {
      if (next[k] < schedule.worker_ops[k].size()) return false;
    }
    return true;
  };
  while (!finished()) {
    std::vector<std::string> cells(K, ".");
    bool any = false;
    for (int k = 0; k < K; ++k) {
      const auto& ops = schedule.worker_ops[k];
      if (next[k] >= ops.size()) continue;
      const Op op = ops[next[k]];
      const int64_t i = op_slot(schedule, op);
      bool ready = false;
      if (op.kind == OpKind::kForward) {
        ready = k == 0 || done_before(forward_slot[k - 1][i], now);
      } else if (op.kind == OpKind::kBackward) {
        ready = k == K - 1 ? done_before(forward_slot[k][i], now)
                           : done_before(backward_slot[k + 1][i], now);
      } else {
        ready = true;  // an update directly follows its backward
      }
      if (!ready) continue;
      ++next[k];
      any = true;
      cells[k] = to_string(op);
      (op.kind == OpKind::kForward ? forward_slot : backward_slot)[k][i] = now;
      if (op.kind == OpKind::kBackward && next[k] < ops.size() &&
          ops[next[k]].kind == OpKind::kUpdate) {
        cells[k] += "+" + to_string(ops[next[k]++]);
      }
    }
    SP_CHECK(any, "schedule deadlocks at time slot ", now);
    if (rows < max_rows) {
      out << now;
      for (const auto& cell : cells) out << "\t" << cell;
      out << "\n";
    }
    ++rows;
    ++now;
  }
  if (rows > max_rows) out << "... " << rows - max_rows << " more time slots\n";
  return out.str();
}

}  // namespace stalepipe::schedule
