#include "links_impl.h"

#include <map>

#include "stalepipe/common/error.h"

namespace stalepipe::exec::detail {

namespace {

using SkipNames = std::map<std::pair<int, int>, std::vector<std::string>>;  // (from, to) -> names

// The skip tensors of `stages` by (producer, consumer).
SkipNames skip_names(const std::vector<Stage*>& stages) {
  std::map<std::string, int> consumer;
  for (size_t k = 0; k < stages.size(); ++k) {
    for (const std::string& name : stages[k]->skip_inputs()) {
      SP_CHECK(consumer.emplace(name, static_cast<int>(k)).second, "pipeline wiring: partitions ",
               consumer[name] + 1, " and ", k + 1, " both take skip tensor '", name, "'");
    }
  }
  SkipNames names;
  for (size_t k = 0; k < stages.size(); ++k) {
    for (const std::string& name : stages[k]->skip_outputs()) {
      const auto it = consumer.find(name);
      SP_CHECK(it != consumer.end() && it->second > static_cast<int>(k), "pipeline wiring: partition ",
               k + 1, " sends skip tensor '", name, "', which no later partition takes");
      names[{static_cast<int>(k), it->second}].push_back(name);
      consumer.erase(it);
    }
  }
  SP_CHECK(consumer.empty(), "pipeline wiring: partition ", consumer.begin()->second + 1,
           " takes skip tensor '", consumer.begin()->first, "', which no earlier partition sends");
  return names;
}

std::vector<std::string> joined(std::vector<std::string> first, const std::vector<std::string>& then) {
  first.insert(first.end(), then.begin(), then.end());
  return first;
}

}  // namespace

Wiring Wiring::chain(int workers) { return make(workers, {}); }

Wiring Wiring::pipeline(const std::vector<Stage*>& stages) {
  return make(static_cast<int>(stages.size()), skip_names(stages));
}

Wiring Wiring::make(int K, const SkipNames& skips) {
  Wiring w;
  for (int k = 0; k + 1 < K; ++k) {
    const auto it = skips.find({k, k + 1});
    const std::vector<std::string> along = it == skips.end() ? std::vector<std::string>() : it->second;
    w.routes_.push_back({0, k, k + 1, Lane::kActivation, joined({kActivation, kTarget}, along)});
    w.routes_.push_back({0, k + 1, k, Lane::kGradient, joined({kGradient}, along)});
  }
  for (const auto& [ends, names] : skips) {
    if (ends.second == ends.first + 1) continue;
    w.routes_.push_back({0, ends.first, ends.second, Lane::kActivation, names});
    w.routes_.push_back({0, ends.second, ends.first, Lane::kGradient, names});
  }
  for (size_t i = 0; i < w.routes_.size(); ++i) w.routes_[i].id = static_cast<int>(i);
  return w;
}

const Route& Wiring::find(int source, int destination, Lane lane) const {
  for (const Route& r : routes_) {
    if (r.source == source && r.destination == destination && r.lane == lane) return r;
  }
  throw RuntimeError(c10::str("pipeline wiring: no ", lane == Lane::kActivation ? "activation" : "gradient",
                              " route from worker ", source + 1, " to worker ", destination + 1));
}

void Wiring::check_names(const Route& route, const std::vector<std::string>& names) {
  SP_CHECK(names == route.names, "pipeline wiring: a message from worker ", route.source + 1,
           " to worker ", route.destination + 1, " carries [", c10::Join(", ", names),
           "], its route [", c10::Join(", ", route.names), "]");
}

torch::Tensor& Message::at(const std::string& name) {
  for (auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  throw RuntimeError(c10::str("pipeline register of mini-batch ", step, ": no tensor '", name,
                              "' among [", c10::Join(", ", names()), "]"));
}

bool Message::has_names(const std::vector<std::string>& expected) const {
  if (tensors.size() != expected.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].first != expected[i]) return false;
  }
  return true;
}

std::vector<std::string> Message::names() const {
  std::vector<std::string> out;
  out.reserve(tensors.size());
  for (const auto& entry : tensors) out.push_back(entry.first);
  return out;
}

}  // namespace stalepipe::exec::detail
