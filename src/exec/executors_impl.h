#pragma once

#include "stalepipe/exec/executor.h"

namespace stalepipe::exec {

class EmulatedExecutor final : public Executor {
 public:
  std::string name() const override { return "emulated"; }
  SegmentResult run(const schedule::Schedule& schedule, std::vector<Stage*>& stages,
                    const SegmentContext& context) override;
};

class ThreadsExecutor final : public Executor {
 public:
  std::string name() const override { return "threads"; }
  SegmentResult run(const schedule::Schedule& schedule, std::vector<Stage*>& stages,
                    const SegmentContext& context) override;
};

}  // namespace stalepipe::exec
