#include "stalepipe/api/options_json.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>

#include "stalepipe/api/option_fields.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace {

using nlohmann::json;

// Not in the files of 0.2 (the legacy hash's JSON).
const char* const kNewIn03[] = {"stop_at_step", "profile_batch", "segment_steps", "model_file"};

json hashed_json(const Options& options) {
  json j = to_json(options);
  const json defaults = to_json(Options());
  for (const OptionField& f : option_fields()) {
    const bool at_default = j[f.key] == defaults[f.key];
    if (f.hash == HashRule::kNever || (f.hash == HashRule::kUnlessDefault && at_default)) j.erase(f.key);
  }
  // The layout as it runs, under the earlier key "channels_last" (present only when true), so
  // that "auto" and the layout it stands for hash alike, and so do runs written before.
  j.erase("layout");
  if (resolved_layout(options) == Layout::kChannelsLast) j["channels_last"] = true;
  return j;
}

}  // namespace

json to_json(const Options& options) {
  json j;
  for (const OptionField& f : option_fields()) j[f.key] = f.write(options);
  return j;
}

Options options_from_json(const json& j, const std::string& source) {
  Options options;
  try {
    for (const OptionField& f : option_fields()) {
      if (j.contains(f.key)) {
        f.read(j.at(f.key), options, source + ": " + f.key);
        continue;
      }
      // An earlier key, or none: the field's reading of a file from before it (null).
      const auto legacy = std::find_if(f.legacy_keys.begin(), f.legacy_keys.end(),
                                       [&](const std::string& key) { return j.contains(key); });
      if (legacy != f.legacy_keys.end()) {
        f.read(j.at(*legacy), options, source + ": " + *legacy);
      } else if (!f.legacy_keys.empty()) {
        f.read(json(nullptr), options, source + ": " + f.key);
      }
    }
  } catch (const json::exception& e) {
    throw RuntimeError(source + ": not a valid stalepipe config: " + e.what());
  }
  return options;
}

std::string config_hash(const Options& options) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64: offset basis, then prime per byte
  for (unsigned char c : hashed_json(options).dump()) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string legacy_config_hash(const Options& options) {
  json j = hashed_json(options);
  for (const char* key : kNewIn03) j.erase(key);
  std::ostringstream out;
  out << std::hex << std::hash<std::string>{}(j.dump());
  return out.str();
}

TrainingPoint training_point_from_text(const std::string& text, const std::string& field) {
  if (text.empty()) return {};
  const bool in_steps = text.back() == 's';
  const std::string number = in_steps ? text.substr(0, text.size() - 1) : text;
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SP_CHECK_ARG(used == number.size() && !number.empty() && value >= 0, field, " ", text,
               ": expected a number of epochs (3) or of steps (250s)");
  return {value, in_steps};
}

std::string to_text(const TrainingPoint& point) {
  if (!point.set()) return "";
  return std::to_string(point.count) + (point.in_steps ? "s" : "");
}

std::vector<torch::Device> devices_from_text(const std::string& text, const std::string& field) {
  std::vector<torch::Device> devices;
  std::stringstream in(text);
  std::string item;
  while (!text.empty() && std::getline(in, item, ',')) {
    try {
      devices.emplace_back(item);
    } catch (const c10::Error&) {
      throw UsageError(field + " " + text + ": '" + item + "' is not a device; expected cpu or cuda:N");
    }
  }
  return devices;
}

std::string to_text(const std::vector<torch::Device>& devices) {
  std::string text;
  for (const auto& d : devices) text += (text.empty() ? "" : ",") + d.str();
  return text;
}

}  // namespace stalepipe
