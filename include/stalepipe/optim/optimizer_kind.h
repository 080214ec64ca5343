// Which update rule a partition's optimizer applies (optim/optimizer.h), by name.
#pragma once

#include <string>

namespace stalepipe::optim {

enum class OptimizerKind { kSgd, kAdamW };
std::string to_string(OptimizerKind kind);  // "sgd" | "adamw"
// Throws UsageError naming `field` and the valid names.
OptimizerKind optimizer_from_name(const std::string& name, const std::string& field = "OptimizerOptions::algorithm");

}  // namespace stalepipe::optim
