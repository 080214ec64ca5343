// What machine a run trained on, in one line, so that training times are compared only
// between runs of one machine: sessions land on machines whose cores differ by up to 4.5x in
// speed (docs/results.md, "Time to accuracy").
#pragma once

#include <string>

namespace stalepipe {

// This machine: "MODEL (family F, model M), N CPUs, ISA", e.g. "AMD EPYC (family 26, model 2),
// 2 CPUs, AVX-512". The CPU comes from /proc/cpuinfo; N is the CPUs this process may run on;
// ISA is the widest vector extension the CPU reports (AVX-512, AVX2, or none named). Where
// /proc/cpuinfo is missing the CPU is "unknown CPU".
std::string machine_description();

// The same line from the text of a /proc/cpuinfo and a CPU count (what machine_description()
// reads; separate so that tests can give other machines' text).
std::string describe_machine(const std::string& cpuinfo, unsigned cpus);

}  // namespace stalepipe
