// A stalepipe data set as a torch::data dataset, for torch::data::make_data_loader and
// PipelineTrainer::fit:
//
//   auto split = stalepipe::data::load_dataset("fashion-mnist");
//   auto loader = torch::data::make_data_loader(
//       stalepipe::data::TorchDataset(split.train, stalepipe::data::compute_normalization(split.train))
//           .map(torch::data::transforms::Stack<>()),
//       torch::data::DataLoaderOptions().batch_size(128));
//
// get(i) is sample i as the Loader (loader.h) makes it, without augmentation: data float32
// [C, H', W'] = (pixel / 255 - mean[c]) / std[c] (pixel / 255 if `normalization` is empty),
// zero-padded to pad_to; target int64 scalar. Thread safety: get() may run on several threads.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include <torch/data/datasets/base.h>
#include <torch/data/datasets/map.h>
#include <torch/data/example.h>

#include "stalepipe/data/loader.h"

namespace stalepipe::data {

class TorchDataset : public torch::data::datasets::Dataset<TorchDataset> {
 public:
  // Throws UsageError as Loader does for a malformed data set or normalisation.
  explicit TorchDataset(data::Dataset data, Normalization normalization = {}, int64_t pad_to = 0)
      : loader_(std::move(data), LoaderOptions().batch_size(1).shuffle(false).pad_to(pad_to)
                                     .normalization(std::move(normalization))),
        order_(static_cast<size_t>(loader_.source().size())) {
    std::iota(order_.begin(), order_.end(), int64_t{0});
  }

  torch::data::Example<> get(size_t index) override {
    const Batch b = loader_.batch(0, static_cast<int64_t>(index), order_);
    return {b.x[0], b.y[0]};
  }
  torch::optional<size_t> size() const override { return order_.size(); }

 private:
  Loader loader_;
  std::vector<int64_t> order_;
};

}  // namespace stalepipe::data
