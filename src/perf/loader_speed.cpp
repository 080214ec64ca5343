#include "stalepipe/perf/loader_speed.h"

#include <algorithm>
#include <chrono>

#include "stalepipe/common/clock.h"
#include "stalepipe/common/error.h"
#include "stalepipe/train/run_data.h"

namespace stalepipe::perf {

LoaderSpeed measure_loader(const Options& options, int64_t batches) {
  check_options(options);
  SP_CHECK_ARG(batches >= 1, "loader speed: batches must be >= 1, got ", batches);
  const DataOptions& d = options.data();
  LoaderSpeed speed;
  speed.threads = train::resolved_data_threads(options);
  const auto sources = train::load_run_sources(d, options.run().seed(), speed.threads, std::nullopt);
  const int64_t channels = sources.train->channels();
  // Any normalisation costs the same; measuring the real one would take a pass over the data.
  const data::Normalization norm{std::vector<double>(channels, 0.5), std::vector<double>(channels, 0.25)};
  const data::Loader loader(sources.train,
                            train::train_loader_options(d, options.run().seed(), speed.threads, false).normalization(norm));
  speed.shape = loader.output_shape();
  const std::vector<int64_t> order = loader.epoch_order(0);
  const int64_t available = loader.batches_per_epoch();
  loader.batch(0, 0, order);  // warm-up: first touches of the files and the allocator
  const auto start = SteadyClock::now();
  for (int64_t b = 1; b <= batches; ++b) speed.images += loader.batch(0, b % available, order).x.size(0);
  speed.seconds = seconds_since(start);
  speed.images_per_second = speed.seconds > 0 ? static_cast<double>(speed.images) / speed.seconds : 0;
  return speed;
}

}  // namespace stalepipe::perf
