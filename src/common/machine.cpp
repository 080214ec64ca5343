#include "stalepipe/common/machine.h"

#include <sched.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace stalepipe {
namespace {

// The value of the first "key : value" line of /proc/cpuinfo with this key; "" if none.
std::string field(const std::string& cpuinfo, const std::string& key) {
  std::istringstream lines(cpuinfo);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name != key) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream words(flags);
  std::string word;
  while (words >> word) {
    if (word == flag) return true;
  }
  return false;
}

unsigned usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return static_cast<unsigned>(CPU_COUNT(&set));
  return std::thread::hardware_concurrency();
}

}  // namespace

std::string describe_machine(const std::string& cpuinfo, unsigned cpus) {
  std::string cpu = field(cpuinfo, "model name");
  if (cpu.empty()) cpu = "unknown CPU";
  const std::string family = field(cpuinfo, "cpu family"), model = field(cpuinfo, "model");
  if (!family.empty() && !model.empty()) cpu += " (family " + family + ", model " + model + ")";
  const std::string flags = field(cpuinfo, "flags");
  const char* isa = has_flag(flags, "avx512f") ? ", AVX-512" : has_flag(flags, "avx2") ? ", AVX2" : "";
  return cpu + ", " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") + isa;
}

std::string machine_description() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  return describe_machine(text.str(), usable_cpus());
}

}  // namespace stalepipe
