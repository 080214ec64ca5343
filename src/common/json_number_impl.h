// Numbers read from JSON that came from outside (a manifest, config.json, a profile): nlohmann's
// get<T>() converts any JSON number to T by a cast, which is undefined behaviour when the value
// does not fit (the manifest fuzzer read 1.4e106 as a CRC32). json_get<T> refuses such a value
// with nlohmann's own type_error, which the readers already turn into a message naming the file.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace stalepipe {

template <typename T>
struct JsonGet {
  static T get(const nlohmann::json& j) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      using Limits = std::numeric_limits<T>;
      bool fits = false;
      if (j.is_number_unsigned()) {
        fits = j.get<uint64_t>() <= static_cast<uint64_t>(Limits::max());
      } else if (j.is_number_integer()) {
        const int64_t v = j.get<int64_t>();
        fits = std::is_signed_v<T> ? v >= static_cast<int64_t>(Limits::min()) && v <= static_cast<int64_t>(Limits::max())
                                   : v >= 0 && static_cast<uint64_t>(v) <= static_cast<uint64_t>(Limits::max());
      }
      if (!fits) {
        throw nlohmann::json::type_error::create(
            302, "expected an integer from " + std::to_string(Limits::min()) + " to " + std::to_string(Limits::max()) +
                     ", got " + j.dump(),
            &j);
      }
    }
    return j.get<T>();
  }
};

template <typename T>
struct JsonGet<std::vector<T>> {
  static std::vector<T> get(const nlohmann::json& j) {
    if (!j.is_array()) return j.get<std::vector<T>>();  // nlohmann's own type_error
    std::vector<T> v;
    v.reserve(j.size());
    for (const auto& item : j) v.push_back(JsonGet<T>::get(item));
    return v;
  }
};

// j as T; an integer T takes only a JSON integer that fits in it.
template <typename T>
T json_get(const nlohmann::json& j) {
  return JsonGet<T>::get(j);
}

}  // namespace stalepipe
