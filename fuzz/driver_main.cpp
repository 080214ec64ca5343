// The ordinary build's stand-in for libFuzzer: runs a harness on every file of its corpus
// folder and on `mutations` deterministic mutations of them (a fixed seed, so a failure
// reproduces), so that CI exercises every reader of outside bytes without clang.
//   fuzz_<harness> CORPUS_DIR [MUTATIONS]    prints "N inputs, ok" or the input that failed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fuzz_support.h"

namespace {

// One of the byte-level edits libFuzzer starts from: flip, overwrite, cut, insert, repeat.
std::string mutate(std::string s, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  static const unsigned char kInteresting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', ',', ':', '-', '9', '{', '['};
  switch (pick(6)) {
    case 0: if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8)); break;
    case 1: if (!s.empty()) s[pick(s.size())] = static_cast<char>(kInteresting[pick(sizeof kInteresting)]); break;
    case 2: s.resize(pick(s.size() + 1)); break;
    case 3: s.insert(pick(s.size() + 1), 1 + pick(8), static_cast<char>(kInteresting[pick(sizeof kInteresting)])); break;
    case 4: if (!s.empty()) { const size_t at = pick(s.size()); s.insert(at, s.substr(at, 1 + pick(16))); } break;
    default: if (s.size() >= 4) { const size_t at = pick(s.size() - 3); for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(0xff); } break;
  }
  return s;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS]\n", argv[0]);
    return 2;
  }
  const int mutations = argc > 2 ? std::atoi(argv[2]) : 300;
  std::vector<std::pair<std::string, std::string>> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    if (entry.is_regular_file()) seeds.emplace_back(entry.path().filename().string(), slurp(entry.path()));
  }
  std::sort(seeds.begin(), seeds.end());
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no corpus files\n", argv[1]);
    return 1;
  }
  std::mt19937 rng(20261124);
  std::string what;
  auto run = [&](const std::string& input) {
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: escaped: %s\n", what.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "%s: escaped: an exception of unknown type\n", what.c_str());
    }
    return false;
  };
  int inputs = 0;
  for (const auto& [name, bytes] : seeds) {
    what = name;
    if (!run(bytes)) return 1;
    ++inputs;
  }
  for (int i = 0; i < mutations; ++i) {
    const auto& [name, bytes] = seeds[i % seeds.size()];
    std::string input = mutate(bytes, rng);
    for (size_t extra = rng() % 3; extra > 0; --extra) input = mutate(input, rng);
    what = name + " mutation " + std::to_string(i);
    if (!run(input)) {
      const std::string saved = stalepipe::fuzz::scratch_dir() + "-failing-input";
      std::ofstream(saved, std::ios::binary) << input;
      std::fprintf(stderr, "the input is saved in %s\n", saved.c_str());
      return 1;
    }
    ++inputs;
  }
  std::printf("%d inputs, ok\n", inputs);
  return 0;
}
