// Portable random integers: std::mt19937_64's raw output is specified by the standard, but the
// std::*_distribution classes are not, so every derived value is computed here.
#pragma once

#include <cstdint>
#include <random>

namespace stalepipe {
namespace data {
namespace detail {

// Stream tags keep the generators of different purposes apart for the same seed.
constexpr uint64_t kShuffleStream = 0x53485546464c45ULL;     // "SHUFFLE"
constexpr uint64_t kAugmentStream = 0x4155474d454e54ULL;     // "AUGMENT"
constexpr uint64_t kSyntheticStream = 0x53594e5448ULL;       // "SYNTH"
constexpr uint64_t kCropStream = 0x43524f50ULL;               // "CROP"
constexpr uint64_t kSplitStream = 0x53504c4954ULL;            // "SPLIT"

// Steele, Lea and Flood's splitmix64 finaliser: a bijection with good avalanche.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for the generator identified by the pair (a, b).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(a) ^ b);
}

// Uniform in [0, n), n >= 1, without modulo bias: reject the lowest (2^64 mod n) values.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // == 2^64 mod n
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) {
      return r % n;
    }
  }
}

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
