// The hybrid switch point (PipelineOptions::hybrid_switch, config.json "hybrid_switch"):
// "3" epochs or "250s" steps.
#include "fuzz_support.h"
#include "stalepipe/api/options_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  fuzz::expect_only_stalepipe_errors(
      [&] { training_point_from_text(fuzz::as_string(data, size), "PipelineOptions::hybrid_switch"); });
  return 0;
}
