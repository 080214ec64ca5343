// Checkpoint manifests (exec/checkpoint.h): read_checkpoint_manifest, then loading both
// partitions through it from whole shards, so that the size and checksum checks, the shard
// names and the step and partition tags all meet the bytes.
#include "checkpoint_fixture.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  const auto& f = fuzz::checkpoint_fixture();
  const std::string path = fuzz::write_scratch("run/checkpoint/manifest.json", fuzz::as_string(data, size));
  fuzz::expect_only_stalepipe_errors([&] {
    const auto manifest = exec::read_checkpoint_manifest(path);
    for (int k = 0; k < 2; ++k) exec::load_checkpoint_shard(manifest, f.pipeline->stage(k), k, 2);
  });
  return 0;
}
