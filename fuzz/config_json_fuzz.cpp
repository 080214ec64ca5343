// A run directory's config.json as resume and eval read it (train::read_run_config), then the
// checks every option goes through before a run is built (check_options).
#include "fuzz_support.h"
#include "stalepipe/api/options.h"
#include "stalepipe/train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  fuzz::write_scratch("run/config.json", fuzz::as_string(data, size));
  fuzz::expect_only_stalepipe_errors([&] { check_options(train::read_run_config(fuzz::scratch_dir() + "/run")); });
  return 0;
}
