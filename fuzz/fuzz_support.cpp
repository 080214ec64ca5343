#include "fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace stalepipe::fuzz {
namespace {

void remove_scratch() {
  std::error_code ignored;
  std::filesystem::remove_all(scratch_dir(), ignored);
}

}  // namespace

// Never destroyed: remove_scratch runs at exit, after static objects built later than its
// registration are gone (a static std::string here was, as libFuzzer's ASan build reported).
const std::string& scratch_dir() {
  static const std::string* const dir = [] {
    // /dev/shm when there is one: libFuzzer writes these files thousands of times a second.
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* pattern = new std::string(std::string(base) + "/stalepipe-fuzz-XXXXXX");
    if (::mkdtemp(pattern->data()) == nullptr) std::abort();
    std::atexit(remove_scratch);
    return pattern;
  }();
  return *dir;
}

std::string write_scratch(const std::string& name, const std::string& bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace stalepipe::fuzz
