// A data::Loader's epochs as the training loop's BatchSource, read ahead on a thread: what
// `stalepipe train` feeds PipelineTrainer::fit with, for any sample source.
//
//   data::Loader loader(source, data::LoaderOptions().batch_size(64).threads(2));
//   stalepipe::LoaderSource batches(loader);
//   trainer.fit(batches, hooks);
#pragma once

#include <cstdint>
#include <optional>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/data/loader.h"

namespace stalepipe {

class LoaderSource : public BatchSource {
 public:
  // `loader` must outlive this source.
  explicit LoaderSource(const data::Loader& loader) : loader_(loader) {}
  int64_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  void start_epoch(int64_t epoch, int64_t first) override;
  exec::Input next() override;
  // The loader's own rate in the epoch so far (0 before its first batch): set beside the
  // training rate, it shows whether training waits for data.
  double loader_images_per_second() const { return prefetch_ ? prefetch_->images_per_second() : 0; }

 private:
  const data::Loader& loader_;
  std::optional<data::Prefetcher> prefetch_;
  int64_t next_index_ = 0;
};

}  // namespace stalepipe
