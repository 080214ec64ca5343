#include "stalepipe/exec/executor.h"

#include "executors_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/names.h"

namespace stalepipe::exec {
namespace {
const std::pair<ExecutorKind, const char*> kExecutorNames[] = {{ExecutorKind::kThreads, "threads"},
                                                               {ExecutorKind::kEmulated, "emulated"},
                                                               {ExecutorKind::kProcesses, "processes"}};
}  // namespace

ExecutorKind executor_from_name(const std::string& name, const std::string& field) {
  return value_of(kExecutorNames, name, field);
}

std::string to_string(ExecutorKind kind) { return name_of(kExecutorNames, kind); }

int64_t default_read_losses_every(const torch::Device& device) { return device.is_cpu() ? 1 : 32; }

std::unique_ptr<Executor> make_executor(ExecutorKind kind) {
  SP_CHECK_ARG(kind != ExecutorKind::kProcesses,
               "the processes executor runs one partition per process: it needs a "
               "process group (exec/processes.h, make_processes_executor)");
  if (kind == ExecutorKind::kEmulated) return std::make_unique<EmulatedExecutor>();
  return std::make_unique<ThreadsExecutor>();
}

}  // namespace stalepipe::exec
