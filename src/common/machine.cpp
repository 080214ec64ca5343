#include "stalepipe/common/machine.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
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

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "1 GPU: NVIDIA H200", "2 GPUs: NVIDIA H100 80GB HBM3", "2 GPUs: A + B"; "" for none.
std::string describe_gpus(const std::vector<std::string>& gpus) {
  if (gpus.empty()) return "";
  const bool alike = std::all_of(gpus.begin(), gpus.end(), [&](const std::string& g) { return g == gpus[0]; });
  std::string models = gpus[0];
  for (size_t i = 1; !alike && i < gpus.size(); ++i) models += " + " + gpus[i];
  return ", " + std::to_string(gpus.size()) + (gpus.size() == 1 ? " GPU: " : " GPUs: ") + models;
}

// The models of the GPUs the NVIDIA driver lists, in bus order; none where it is not loaded.
std::vector<std::string> nvidia_gpus() {
  namespace fs = std::filesystem;
  std::vector<std::string> buses;
  std::error_code error;
  for (fs::directory_iterator it("/proc/driver/nvidia/gpus", error), end; !error && it != end; it.increment(error))
    buses.push_back(it->path().string());
  std::sort(buses.begin(), buses.end());
  std::vector<std::string> models;
  for (const auto& bus : buses) models.push_back(gpu_model(read_text(bus + "/information")));
  return models;
}

unsigned usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return static_cast<unsigned>(CPU_COUNT(&set));
  return std::thread::hardware_concurrency();
}

}  // namespace

std::string gpu_model(const std::string& information) {
  const std::string model = field(information, "Model");
  return model.empty() ? "unknown GPU" : model;
}

std::string describe_machine(const std::string& cpuinfo, unsigned cpus, const std::vector<std::string>& gpus) {
  std::string cpu = field(cpuinfo, "model name");
  if (cpu.empty()) cpu = "unknown CPU";
  const std::string family = field(cpuinfo, "cpu family"), model = field(cpuinfo, "model");
  if (!family.empty() && !model.empty()) cpu += " (family " + family + ", model " + model + ")";
  const std::string flags = field(cpuinfo, "flags");
  const char* isa = has_flag(flags, "avx512f") ? ", AVX-512" : has_flag(flags, "avx2") ? ", AVX2" : "";
  return cpu + ", " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") + isa + describe_gpus(gpus);
}

std::string machine_description() {
  return describe_machine(read_text("/proc/cpuinfo"), usable_cpus(), nvidia_gpus());
}

}  // namespace stalepipe
