// PPV text (PipelineOptions::ppv, config.json "pipeline"): parse_ppv, then make_plan's checks
// of the layer numbers against LeNet-5.
#include "fuzz_support.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  static const models::Model model = models::make_model("lenet5", models::InputShape{});
  fuzz::expect_only_stalepipe_errors(
      [&] { partition::make_plan(model, partition::parse_ppv(fuzz::as_string(data, size))); });
  return 0;
}
