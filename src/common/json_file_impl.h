// Reading a JSON file with a useful error. Private: nlohmann::json is not part of the public API.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"

namespace stalepipe {

// Throws RuntimeError "PATH: not valid JSON: ..." (or the read error naming PATH).
inline nlohmann::json read_json_file(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace stalepipe
