// Data set specs (DataOptions::dataset, config.json "data"): "synthetic:N", "mnist:DIR"...
// parse_dataset_spec only: loading would read whatever directory the bytes name.
#include "fuzz_support.h"
#include "stalepipe/data/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  fuzz::expect_only_stalepipe_errors([&] { data::parse_dataset_spec(fuzz::as_string(data, size)); });
  return 0;
}
