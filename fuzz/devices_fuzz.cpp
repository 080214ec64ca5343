// Device lists (PipelineOptions::devices, config.json "devices"): "cpu,cuda:1".
#include "fuzz_support.h"
#include "stalepipe/api/options_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  fuzz::expect_only_stalepipe_errors(
      [&] { devices_from_text(fuzz::as_string(data, size), "PipelineOptions::devices"); });
  return 0;
}
