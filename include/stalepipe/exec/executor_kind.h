// Which executor runs a pipeline's workers (exec/executor.h has the executors themselves).
#pragma once

#include <string>

namespace stalepipe::exec {

enum class ExecutorKind { kEmulated, kThreads, kProcesses };
// "emulated" | "threads" | "processes"; UsageError naming `field` otherwise.
ExecutorKind executor_from_name(const std::string& name,
                                const std::string& field = "executor");
std::string to_string(ExecutorKind kind);

}  // namespace stalepipe::exec
