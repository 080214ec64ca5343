// Where a loader's samples come from: anything that gives sample i's pixels on demand.
//
// Two kinds ship: a Dataset held in memory (TensorSource, the IDX and CIFAR-10 readers'), and
// a folder of encoded images decoded when a batch needs them (data/folder.h). A library user
// brings their own reader by deriving from DecodingSource and decoding one sample at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <torch/types.h>

#include "stalepipe/data/dataset.h"
#include "stalepipe/data/image.h"

namespace stalepipe {
namespace data {

// Chooses the region of a sample to keep, from its stored {height, width}.
using RegionPicker = std::function<Region(int64_t height, int64_t width)>;

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  virtual const std::string& name() const = 0;  // e.g. "photos/train"; used in messages
  virtual int64_t size() const = 0;              // N >= 0
  virtual int64_t channels() const = 0;          // C of every sample read
  // The classes, or 0 where targets() holds float regression targets.
  virtual int64_t num_classes() const = 0;
  // Every sample's target, known without decoding: int64 [N] class indices, or float [N, D].
  virtual const torch::Tensor& targets() const = 0;
  // {H, W} when every sample is stored at that size; nullopt where sizes differ (a loader
  // then needs an output size to make batches of them).
  virtual std::optional<std::pair<int64_t, int64_t>> common_size() const = 0;

  // The region `pick` chooses from sample i's stored size, as uint8 [C, h, w]. A source may
  // return the region at a reduced scale while h >= min_height and w >= min_width (a JPEG
  // decoded with DCT scaling); 0, 0 asks for full scale. Called from several threads at once.
  // Throws RuntimeError naming the sample's file (or index) if it cannot be read.
  virtual torch::Tensor read(int64_t i, const RegionPicker& pick, int64_t min_height,
                             int64_t min_width) const = 0;

  // Whether gather() is cheaper than reading samples one by one (an in-memory tensor).
  virtual bool gathers() const { return false; }
  // Samples `ids` at full scale, all of common_size(), as uint8 [B, C, H, W]. Only where
  // gathers(); UsageError otherwise.
  virtual torch::Tensor gather(const torch::Tensor& ids) const;
};

// UsageError naming `source` unless its targets are int64 [N] class indices, or float
// [N, D] where num_classes() is 0 (N = size()).
void check_targets(const SampleSource& source);
// RuntimeError naming `source` and sample i unless `sample` is uint8 [channels(), H, W].
void check_sample(const SampleSource& source, int64_t i, const torch::Tensor& sample);

// A user's reader: implement decode(i) (the whole sample, uint8 [C, H, W]); read() crops it.
class DecodingSource : public SampleSource {
 public:
  virtual torch::Tensor decode(int64_t i) const = 0;
  torch::Tensor read(int64_t i, const RegionPicker& pick, int64_t min_height,
                     int64_t min_width) const override;
};

// A Dataset in memory as a source (a view: the tensors are shared, not copied).
class TensorSource : public SampleSource {
 public:
  // Throws UsageError for a malformed data set (images must be uint8 [N, C, H, W] on the CPU;
  // targets int64 [N], or float [N, D] where num_classes is 0).
  explicit TensorSource(Dataset data);

  const std::string& name() const override { return data_.name; }
  int64_t size() const override { return data_.size(); }
  int64_t channels() const override { return data_.channels(); }
  int64_t num_classes() const override { return data_.num_classes; }
  const torch::Tensor& targets() const override { return data_.labels; }
  std::optional<std::pair<int64_t, int64_t>> common_size() const override;
  torch::Tensor read(int64_t i, const RegionPicker& pick, int64_t min_height,
                     int64_t min_width) const override;
  bool gathers() const override { return true; }
  torch::Tensor gather(const torch::Tensor& ids) const override;

  const Dataset& dataset() const { return data_; }

 private:
  Dataset data_;
};

// The first n samples of `source` (0 <= n <= size(), else UsageError), in its order.
std::shared_ptr<const SampleSource> first_samples(std::shared_ptr<const SampleSource> source,
                                                  int64_t n);

// Every sample at its stored size, decoded once into memory: the in-memory Dataset of the
// same pixels. Needs common_size() (UsageError otherwise). Decodes on `threads` threads.
Dataset preload(const SampleSource& source, int threads = 1);

}  // namespace data
}  // namespace stalepipe
