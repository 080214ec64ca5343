// machine_description(): the line that tells which machine a run's times come from.
#include <gtest/gtest.h>

#include "stalepipe/common/machine.h"

namespace stalepipe {
namespace {

// The lines of a /proc/cpuinfo that matter, in the kernel's layout (tabs before the colon).
std::string cpuinfo(const std::string& flags) {
  return "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
         "model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: " + flags + "\n\nprocessor\t: 1\n"
         "model name\t: another CPU\n";
}

TEST(Machine, NamesTheCpuItsFamilyAndModelTheCpusAndTheWidestVectorExtension) {
  EXPECT_EQ(describe_machine(cpuinfo("fpu sse2 avx2 avx512f avx512bw"), 2),
            "AMD EPYC (family 26, model 2), 2 CPUs, AVX-512");
  EXPECT_EQ(describe_machine(cpuinfo("fpu sse2 avx avx2"), 16), "AMD EPYC (family 26, model 2), 16 CPUs, AVX2");
  // avx512 extensions without the foundation, and avx2 only as part of a longer word.
  EXPECT_EQ(describe_machine(cpuinfo("fpu avx512_vnni xavx2"), 1), "AMD EPYC (family 26, model 2), 1 CPU");
}

TEST(Machine, AnUnknownCpuIsSaidToBeUnknown) {
  EXPECT_EQ(describe_machine("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n", 4), "unknown CPU, 4 CPUs");
  EXPECT_EQ(describe_machine("", 1), "unknown CPU, 1 CPU");
}

TEST(Machine, NamesTheGpusAfterTheCpu) {
  const std::string cpu = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n";
  EXPECT_EQ(describe_machine(cpu, 16, {"NVIDIA H200"}), "Intel(R) Xeon(R) Processor, 16 CPUs, 1 GPU: NVIDIA H200");
  EXPECT_EQ(describe_machine(cpu, 16, {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}),
            "Intel(R) Xeon(R) Processor, 16 CPUs, 2 GPUs: NVIDIA H100 80GB HBM3");
  EXPECT_EQ(describe_machine(cpu, 16, {"NVIDIA A100", "NVIDIA H100", "NVIDIA A100"}),
            "Intel(R) Xeon(R) Processor, 16 CPUs, 3 GPUs: NVIDIA A100 + NVIDIA H100 + NVIDIA A100");
}

TEST(Machine, ReadsTheGpuModelFromTheDriversInformationFile) {
  // The layout of /proc/driver/nvidia/gpus/BUS/information (tabs and spaces after the colon).
  EXPECT_EQ(gpu_model("Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t GPU-0a1b\nBus Type: \t PCIe\n"),
            "NVIDIA H200");
  EXPECT_EQ(gpu_model("IRQ: \t 42\n"), "unknown GPU");
}

TEST(Machine, ThisMachineIsDescribed) {
  const std::string here = machine_description();
  EXPECT_NE(here.find(" CPU"), std::string::npos) << here;
  EXPECT_EQ(here, machine_description());  // the same line every time
}

}  // namespace
}  // namespace stalepipe
