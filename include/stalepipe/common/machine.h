// What machine a run trained on, in one line, so that training times are compared only
// between runs of one machine: runs land on machines whose cores differ by up to 4.5x in
// speed (docs/results.md, "Time to accuracy").
#pragma once

#include <string>
#include <vector>

namespace stalepipe {

// This machine: "MODEL (family F, model M), N CPUs, ISA[, GPUS]", e.g. "AMD EPYC (family 26,
// model 2), 2 CPUs, AVX-512". The CPU comes from /proc/cpuinfo; N is the CPUs this process may
// run on; ISA is the widest vector extension the CPU reports (AVX-512, AVX2, or none named).
// Where /proc/cpuinfo is missing the CPU is "unknown CPU". GPUS names the NVIDIA GPUs the
// driver lists under /proc/driver/nvidia/gpus ("1 GPU: NVIDIA H200"), since GPU machines of
// different GPUs can have the same CPU.
std::string machine_description();

// The same line from the text of a /proc/cpuinfo, a CPU count and the GPUs' models (what
// machine_description() reads; separate so that tests can give other machines' text).
std::string describe_machine(const std::string& cpuinfo, unsigned cpus,
                             const std::vector<std::string>& gpus = {});

// A GPU's model from the text of the NVIDIA driver's /proc/driver/nvidia/gpus/BUS/information
// ("Model: \t\t NVIDIA H200"); "unknown GPU" if the text names none.
std::string gpu_model(const std::string& information);

}  // namespace stalepipe
