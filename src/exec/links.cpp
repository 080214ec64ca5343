#include "links_impl.h"

#include "stalepipe/common/error.h"

namespace stalepipe::exec::detail {

Wiring Wiring::chain(int workers) {
  Wiring w;
  for (int k = 0; k + 1 < workers; ++k) {
    w.routes_.push_back({0, k, k + 1, Lane::kActivation, {kActivation, kTarget}});
    w.routes_.push_back({0, k + 1, k, Lane::kGradient, {kGradient}});
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
