// Experiment files of `stalepipe sweep` (study/sweep.h: load_experiment), then the checks of
// every run's options.
#include "fuzz_support.h"
#include "stalepipe/api/options.h"
#include "stalepipe/study/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  const std::string path = fuzz::write_scratch("experiment.json", fuzz::as_string(data, size));
  fuzz::expect_only_stalepipe_errors([&] {
    for (const auto& run : study::load_experiment(path).runs) check_options(run.options);
  });
  return 0;
}
