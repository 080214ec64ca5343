#include <ATen/CPUGeneratorImpl.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/model.h"
#include "stalepipe/models/torchscript.h"

namespace stalepipe::models {

Model independent_copy(const Model& model) {
  if (model.script) return copy_torchscript(model);
  // Cloneable::clone builds each module afresh (drawing initial weights) before copying the
  // values in: the draws must not move the run's random numbers.
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto rng = generator.get_state();
  Model copy = model;
  try {
    for (Unit& unit : copy.units) unit.module = unit.module.clone();
  } catch (const c10::Error& e) {
    generator.set_state(rng);
    for (size_t u = 0; u < copy.units.size(); ++u) {
      if (copy.units[u].module.ptr() == model.units[u].module.ptr()) {
        throw UsageError(c10::str("model ", model.name, ": unit ", model.units[u].name,
                                  " cannot be copied for a second replica in this process (its module is not a "
                                  "torch::nn::Cloneable); run the replicas as processes"));
      }
    }
    throw;
  }
  generator.set_state(rng);
  return copy;
}

}  // namespace stalepipe::models
