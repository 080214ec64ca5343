// Where a process of a processes run sits (exec/processes.h has the group itself).
#pragma once

#include <string>

#include <torch/arg.h>

namespace stalepipe::exec {

// Where this process sits in the group; torchrun's conventions.
struct ProcessGroupOptions {
  TORCH_ARG(int, rank) = -1;                        // -1: from $RANK
  TORCH_ARG(int, world_size) = -1;                  // -1: from $WORLD_SIZE
  TORCH_ARG(std::string, master_addr) = "";         // empty: $MASTER_ADDR, else 127.0.0.1
  TORCH_ARG(int, master_port) = -1;                 // -1: $MASTER_PORT, else 29500
  TORCH_ARG(int, timeout_seconds) = 60;             // bound on every wait for a peer

 public:  // TORCH_ARG leaves the struct in private:
  // Fills the fields left at their "unset" value from the environment. Throws UsageError if a
  // variable is malformed or the rank is outside [0, world_size).
  ProcessGroupOptions resolved() const;
};

}  // namespace stalepipe::exec
