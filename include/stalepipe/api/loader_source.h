// A data::Loader's epochs as the training loop's BatchSource, read ahead on a thread: what
// `stalepipe train` feeds PipelineTrainer::fit with, for any sample source.
//
//   data::Loader loader(source, data::LoaderOptions().batch_size(64).threads(2));
//   stalepipe::LoaderSource batches(loader);
//   trainer.fit(batches, hooks);
//
// For a first partition on a GPU, LoaderSource(loader, torch::Device("cuda:0")) copies each
// batch to the device `ahead` batches before it is asked for, on a stream of its own (from
// page-locked memory with LoaderOptions::pin_memory), so the copy overlaps the training of the
// batches before it; the batch carries the copy's event (exec::Input::ready). A loader with
// LoaderOptions::raw_pixels sends uint8 pixels, which are normalised where they land, on that
// stream (on the CPU, in next()).
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/exec/device_stream.h"

namespace stalepipe {

class LoaderSource : public BatchSource {
 public:
  // `loader` must outlive this source. device: where the first partition runs; batches are
  // read `ahead` batches ahead of next() (within an epoch) and, on a GPU, copied there then.
  explicit LoaderSource(const data::Loader& loader, torch::Device device = torch::kCPU, int ahead = 2);
  int64_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  void start_epoch(int64_t epoch, int64_t first) override;
  exec::Input next() override;
  // The loader's own rate in the epoch so far (0 before its first batch): set beside the
  // training rate, it shows whether training waits for data.
  double loader_images_per_second() const { return prefetch_ ? prefetch_->images_per_second() : 0; }

 private:
  // A batch read ahead, or the error reading it threw (given back when its turn comes, so
  // that the batches before it still train).
  struct Ahead {
    exec::Input input;
    std::exception_ptr error;
  };
  // The loader's next batch of the epoch, on the device; an undefined x after the last one.
  Ahead fetch();

  const data::Loader& loader_;
  torch::Device device_;
  size_t ahead_;
  std::unique_ptr<exec::DeviceStream> copies_;  // where the batches are copied and normalised
  std::optional<data::PixelNormalizer> normalize_;  // on device_, for a loader of raw pixels
  std::optional<data::Prefetcher> prefetch_;
  std::deque<Ahead> read_;  // fetched, not yet returned
  int64_t next_index_ = 0;
};

}  // namespace stalepipe
