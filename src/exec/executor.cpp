#include "stalepipe/exec/executor.h"

#include "executors_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe::exec {

std::vector<std::string> executor_names() { return {"emulated", "threads", "processes"}; }

std::unique_ptr<Executor> make_executor(const std::string& name) {
  if (name == "emulated") return std::make_unique<EmulatedExecutor>();
  if (name == "threads") return std::make_unique<ThreadsExecutor>();
  if (name == "processes") {
    throw UsageError("--executor processes runs one partition per process: it needs a process "
                     "group (exec/processes.h, make_processes_executor)");
  }
  throw UsageError("--executor " + name + ": unknown executor; expected emulated, threads or processes");
}

}  // namespace stalepipe::exec
