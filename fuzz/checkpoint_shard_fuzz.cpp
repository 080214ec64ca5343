// Checkpoint shards (exec/checkpoint.h: load_checkpoint_shard) under a manifest of format 2:
// the bytes become partition 1's shard, which must match the size and CRC-32 the manifest
// records before LibTorch's deserializer sees it. That guard is what is tested here; the
// deserializer itself (LibTorch's zip and pickle readers) is not stalepipe's code, and only
// the corpus shard, whose checksum matches, reaches it.
#include "checkpoint_fixture.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  const auto& f = fuzz::checkpoint_fixture();
  static const exec::CheckpointManifest manifest =
      exec::read_checkpoint_manifest(f.run_dir + "/checkpoint/manifest.json");
  fuzz::write_scratch("run/checkpoint/" + manifest.shards[0], fuzz::as_string(data, size));
  fuzz::expect_only_stalepipe_errors([&] { exec::load_checkpoint_shard(manifest, f.pipeline->stage(0), 0, 2); });
  return 0;
}
