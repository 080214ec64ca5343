// What crosses a pipeline register, and how workers exchange it. Private to src/exec.
//
// A message carries named tensors along a route, from one worker to another, in one lane:
// activations flow downstream (forward), gradients upstream (backward). Every route is declared
// before a segment runs (Wiring), with the names of the tensors its messages carry in order, so
// that a transport moving bare tensors (the processes executor) restores the names, and so that
// traffic other than a chain's neighbours (a skip tensor to a later partition, a replica's
// reduction) is more routes, not more kinds of message.
//
// On a GPU, `ready` is the event the producer recorded on its stream after writing the tensors;
// the consumer's stream waits on it before reading them (exec/device_stream.h), so no message
// synchronises a device.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "stalepipe/exec/device_stream.h"
#include "stalepipe/exec/stage.h"

namespace stalepipe::exec::detail {

enum class Lane { kActivation, kGradient };

struct Route {
  int id = 0;           // its index in Wiring::routes
  int source = 0;       // sending worker
  int destination = 0;  // receiving worker
  Lane lane = Lane::kActivation;
  std::vector<std::string> names;  // the tensors of every message on it, in order
};

// Tensor names of the chain's routes; a skip tensor and its gradient go by the skip's name
// (models/skips.h reserves these three).
inline const char* const kActivation = "activation";
inline const char* const kTarget = "target";  // travels with the activation to the last worker
inline const char* const kGradient = "gradient";

// The routes of one pipeline.
class Wiring {
 public:
  // A chain of `workers`: worker k sends (activation, target) to k+1 and gradient to k-1.
  static Wiring chain(int workers);
  // The chain of `stages` and their skip tensors (Stage::skip_outputs to skip_inputs): a skip
  // to the next worker rides on the chain's messages (after the chain's tensors), one to a
  // later worker has a route of its own, and its gradient goes back the same way. Throws
  // RuntimeError where a skip has no producer or consumer or goes backwards.
  static Wiring pipeline(const std::vector<Stage*>& stages);

  const std::vector<Route>& routes() const { return routes_; }
  // The route from `source` to `destination` in `lane`; RuntimeError if there is none.
  const Route& find(int source, int destination, Lane lane) const;
  // Throws RuntimeError unless `names` are the route's, in order.
  static void check_names(const Route& route, const std::vector<std::string>& names);

 private:
  // skips: (producer, consumer) -> the names of the skip tensors between them.
  static Wiring make(int workers, const std::map<std::pair<int, int>, std::vector<std::string>>& skips);
  std::vector<Route> routes_;
};

struct Message {
  int64_t step = 0;
  int micro = 0;
  bool stop = false;          // no mini-batch from this step on (activations only; no tensors)
  int64_t batch_samples = 0;  // samples in the whole mini-batch (weights a micro-batch's loss)
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::shared_ptr<const StreamEvent> ready;  // null where the producer needs no waiting for

  void put(std::string name, torch::Tensor tensor) { tensors.emplace_back(std::move(name), std::move(tensor)); }
  // The tensor called `name`; RuntimeError if the message has none.
  torch::Tensor& at(const std::string& name);
  std::vector<std::string> names() const;
  // Whether the tensors are called `names`, in order.
  bool has_names(const std::vector<std::string>& names) const;
};

// How workers exchange messages. recv() blocks until the route's next message is there and
// throws Cancelled if the pipeline is aborting; messages on one route arrive in send order.
// The worker loop checks a message's names against its route before send().
class Links {
 public:
  virtual ~Links() = default;
  virtual void send(const Route& route, Message message) = 0;
  virtual Message recv(const Route& route) = 0;
};

}  // namespace stalepipe::exec::detail
