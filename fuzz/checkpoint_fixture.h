// A two-partition LeNet-5 and a checkpoint of it at step 4 in scratch_dir()/run, for the
// checkpoint harnesses. Built once per process; deterministic (seed 1), so the corpus shard
// fuzz/corpus/checkpoint_shard/part-1.pt is byte for byte the one written here.
#pragma once

#include <string>

#include "stalepipe/exec/checkpoint.h"
#include "stalepipe/exec/pipeline.h"

namespace stalepipe::fuzz {

struct CheckpointFixture {
  exec::Pipeline* pipeline;
  std::string run_dir;  // holds checkpoint/manifest.json and checkpoint/step-4/part-{1,2}.pt
};

const CheckpointFixture& checkpoint_fixture();

}  // namespace stalepipe::fuzz
