// Enum values by name, for the option tree's enums (schedule, balance, executor, ...): one
// table per enum, read both ways, so that config.json and the CLI spell them alike.
#pragma once

#include <string>
#include <utility>

#include "stalepipe/common/error.h"

namespace stalepipe {

template <typename E, size_t N>
using NameTable = std::pair<E, const char*>[N];

// The value named `name`; UsageError "<field> 'name': expected a, b or c" otherwise.
template <typename E, size_t N>
E value_of(const std::pair<E, const char*> (&table)[N], const std::string& name,
           const std::string& field) {
  std::string allowed;
  for (size_t i = 0; i < N; ++i) {
    if (name == table[i].second) return table[i].first;
    allowed += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(table[i].second);
  }
  throw UsageError(field + " '" + name + "': expected " + allowed);
}

template <typename E, size_t N>
std::string name_of(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [v, text] : table) {
    if (v == value) return text;
  }
  return "unknown";
}

}  // namespace stalepipe
