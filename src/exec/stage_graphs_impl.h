// exec::Stage's graphs' state (stage_graphs.cpp). Private to src/exec.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stalepipe/exec/stage.h"
#include "step_graph_impl.h"

namespace stalepipe::exec {

// Whatever a replay reads or writes lives here, at addresses that stay from capture on.
struct Stage::Graphs {
  // A forward in flight: its static inputs (leaves whose gradients the backward graph fills
  // in place), its graphs' outputs, and the gradients of those the backward graph reads.
  struct Slot {
    Pending pending;
    torch::Tensor target;  // the last stage's
    PendingLoss loss;      // the last stage's, as its forward graph leaves them
    std::vector<torch::Tensor> grad_outputs;
    int64_t step = 0;
    int micro = 0;
    double loss_scale = 1.0;
    std::unique_ptr<detail::StepGraph> forward, backward;
    // The forward's inputs (and target) into the statics; the first time, makes them.
    void take(const Pending& p, const torch::Tensor& y);
  };

  GraphSettings settings;
  std::string where;  // "<option>: partition k", how its messages begin
  // The rows of the current segment's first micro-batch of a whole mini-batch, and its loss
  // scale on the last stage: the graphs are captured for these.
  int64_t whole_rows = 0;
  double whole_loss_scale = 1.0;
  bool captured = false;  // a forward was captured: units were watched for random draws before
  int eager_updates = 0;
  // The thread that ran a forward and backward of this partition eagerly in the current
  // segment: the only one that may capture. A thread's first passes fill its per-thread
  // caches (cuDNN's plans, cuBLAS's handle and workspace), which a capture must not create;
  // each segment of the threads executor runs on new threads.
  std::thread::id warm_thread;
  int64_t passes = 0;  // graphed ones
  int64_t eager_passes = 0;  // ones that ran eagerly instead
  // The parameters' gradients were made to stay (allocated before the first capture): zeroed
  // in place from then on, never dropped.
  bool armed = false;
  std::vector<bool> had_gradient;  // per parameter, at the last eager update
  std::string shapes;              // what the graphs were captured for; empty: nothing yet
  bool noted = false;
  std::vector<std::string> notes;
  // unique_ptr: the graphs' bodies refer to their slot, which must not move.
  std::vector<std::unique_ptr<Slot>> slots;
  std::unique_ptr<detail::StepGraph> update;

  bool warm() const { return warm_thread == std::this_thread::get_id(); }

  // Before the first capture: every parameter that had a gradient gets one that stays.
  void arm(const std::vector<torch::Tensor>& params);

  // A graph to capture now, in a memory pool of its own or in `share_pool_of`'s (one replayed
  // right before it). Throws unless warm().
  std::unique_ptr<detail::StepGraph> make(detail::StepGraph* share_pool_of = nullptr) const;

  // A slot no forward in flight holds (slots grow to the forwards a stage keeps in flight).
  int free_slot(const std::map<Key, Pending>& in_flight) {
    std::vector<bool> busy(slots.size());
    for (const auto& entry : in_flight) {
      if (entry.second.slot >= 0) busy[entry.second.slot] = true;
    }
    for (size_t i = 0; i < busy.size(); ++i) {
      if (!busy[i]) return static_cast<int>(i);
    }
    slots.push_back(std::make_unique<Slot>());
    return static_cast<int>(slots.size()) - 1;
  }
};

}  // namespace stalepipe::exec
