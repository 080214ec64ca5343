#include "stalepipe/exec/executor.h"

#include "executors_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe::exec {

std::vector<std::string> executor_names() { return {"emulated", "threads"}; }

std::unique_ptr<Executor> make_executor(const std::string& name) {
  if (name == "emulated") return std::make_unique<EmulatedExecutor>();
  if (name == "threads") return std::make_unique<ThreadsExecutor>();
  throw UsageError("--executor " + name + ": unknown executor; expected emulated or threads");
}

}  // namespace stalepipe::exec
