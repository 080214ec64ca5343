// The mini-batch pipeline: shuffling, augmentation, padding, normalisation, prefetching.
//
// Determinism: a batch is a pure function of (options, epoch, batch index). The epoch's order
// comes from a generator seeded by (seed, epoch); each sample's augmentation from a generator
// seeded by (seed, epoch, sample id). Nothing depends on thread timing, on which batches were
// produced before, or on how samples are grouped into batches, so a run resumed at
// (epoch, index) sees exactly the batches an uninterrupted run would have seen.
//
// Batch layout: x is float32 [B, C, H', W'] on the CPU (page-locked with pin_memory), or uint8
// pixels before normalisation with raw_pixels; y is int64 [B]; B == batch_size except for a
// partial last batch when drop_last is false. H', W' are H, W raised to pad_to.
//
// Pipeline per batch: take the samples (uint8) from the source, each at the output size
// (below), augment (optional), zero-pad to pad_to (optional; raw pixel 0, so the pad reads
// (0 - mean) / std after normalisation), then x = (pixel / 255 - mean[c]) / std[c], or
// pixel / 255 without normalisation.
//
// Output size: with image_size S, each sample's region is resized (antialiased bilinear) to
// S x S: the centred square of its shorter side (torchvision's Resize(S) + CenterCrop(S)), or
// with resized_crop a RandomResizedCrop region (scale 0.08-1, ratio 3/4-4/3) flipped left to
// right with probability 1/2, drawn from a generator seeded by (seed, epoch, sample id).
// With image_size 0 samples keep their stored size, which must be one size for all.
// A source held in memory at the output size (TensorSource) is gathered in one copy; any
// other is read sample by sample on `threads` threads (the caller's among them).
//
// Thread safety: every const member of Loader may be called from several threads at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

#include "stalepipe/common/channel.h"
#include "stalepipe/data/dataset.h"
#include "stalepipe/data/normalize.h"
#include "stalepipe/data/source.h"

namespace stalepipe {
namespace data {

// Augmentation: pad this many zero pixels on each side, then crop back to H x W at a random
// offset (0..2*kAugmentPad in each direction), then flip horizontally with probability 1/2.
constexpr int64_t kAugmentPad = 4;

struct LoaderOptions {
  TORCH_ARG(int64_t, batch_size) = 128;  // >= 1
  TORCH_ARG(bool, shuffle) = true;       // false: samples in stored order every epoch
  TORCH_ARG(bool, drop_last) = false;    // true: drop a partial last batch
  TORCH_ARG(uint64_t, seed) = 0;
  // Data parallelism: each batch holds only slice shard_index of shard_count (common/slices.h)
  // of the samples the whole batch would hold, augmented alike; Batch::samples counts them all.
  TORCH_ARG(int, shard_index) = 0;
  TORCH_ARG(int, shard_count) = 1;
  // CIFAR-style augmentation: pad kAugmentPad, random H x W crop, random horizontal flip.
  TORCH_ARG(bool, augment) = false;
  // If > 0, a side smaller than pad_to is zero-padded, centred, to pad_to (28 -> 32 adds 2 on
  // each side; an odd difference puts the extra pixel at the bottom/right). Sides already
  // >= pad_to are left alone.
  TORCH_ARG(int64_t, pad_to) = 0;
  // Empty: x = pixel / 255. Otherwise one mean and one std (> 0) per channel.
  TORCH_ARG(Normalization, normalization);
  // Batches in page-locked host memory (as PyTorch's DataLoader pin_memory), for a CUDA
  // partition's asynchronous copy; needs a CUDA LibTorch. The values are the same.
  TORCH_ARG(bool, pin_memory) = false;
  // x as uint8 pixels, augmented and padded but not normalised, for a GPU to normalise with
  // normalizer().on(device) after the copy: a quarter of the bytes cross, and the host does
  // no arithmetic. The values after that equal those of the float batch.
  TORCH_ARG(bool, raw_pixels) = false;
  // Output size S x S (0: as stored; see above).
  TORCH_ARG(int64_t, image_size) = 0;
  // RandomResizedCrop and a horizontal flip instead of the centred square (training).
  TORCH_ARG(bool, resized_crop) = false;
  // Threads that read a batch's samples where the source decodes them (>= 1).
  TORCH_ARG(int, threads) = 1;
};

namespace detail {
class DecodePool;
}

struct Batch {
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
  torch::Tensor x;    // float32 [B, C, H', W']
  torch::Tensor y;    // int64 [B]
  int64_t samples = 0;  // of the whole batch, of which x and y hold this shard's slice
};

class Loader {
 public:
  // Throws UsageError for batch_size < 1, an empty or malformed data set (images must be
  // uint8 [N, C, H, W] on the CPU, labels int64 [N]), pad_to < 0, a normalisation whose size
  // differs from the channel count or has a std <= 0, drop_last with fewer samples than
  // one batch (no batch at all), image_size < 0, threads < 1, or image_size 0 with samples
  // stored at different sizes.
  Loader(std::shared_ptr<const SampleSource> source, LoaderOptions options);
  // The in-memory data set as a TensorSource.
  Loader(Dataset data, LoaderOptions options);
  ~Loader();

  // ceil(N / batch_size), or floor when drop_last; always >= 1.
  int64_t batches_per_epoch() const;

  // A permutation of 0..N-1 for `epoch` (>= 0, else UsageError); the identity if !shuffle.
  // Fisher-Yates with std::mt19937_64 seeded from (seed, epoch) through splitmix64, with
  // unbiased bounded integers, so it is the same on every platform.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // Batch `index` (0 <= index < batches_per_epoch()) of `epoch`, taking samples
  // order[index * batch_size ...]. `order` must be epoch_order(epoch) for the result to be the
  // batch of that epoch; any permutation of 0..N-1 is accepted (UsageError otherwise: wrong
  // size or an id out of range). Pass the order in to avoid recomputing it for every batch.
  Batch batch(int64_t epoch, int64_t index, const std::vector<int64_t>& order) const;
  // Convenience: computes epoch_order(epoch) first (O(N)).
  Batch batch(int64_t epoch, int64_t index) const;

  // Samples `ids` (int64 [B]) as the batch of `epoch` takes them, before augmentation,
  // padding and normalisation: uint8 [B, C, S, S], contiguous (S: the output size).
  torch::Tensor pixels(const torch::Tensor& ids, int64_t epoch) const;

  const SampleSource& source() const { return *source_; }
  std::shared_ptr<const SampleSource> shared_source() const { return source_; }
  const LoaderOptions& options() const { return options_; }

  // {C, H', W'}: the shape of one sample in x.
  std::vector<int64_t> output_shape() const;
  // What turns the pixels of a batch (raw_pixels) into its x, on the CPU.
  const PixelNormalizer& normalizer() const { return *normalizer_; }

 private:
  // Reads and resizes sample `id` into `out` (contiguous [C, S, S]).
  void read_sample(int64_t id, int64_t epoch, uint8_t* out) const;
  // The pixels of a batch of an in-memory source: gathered, then augmented and padded whole.
  torch::Tensor gathered(const torch::Tensor& ids, int64_t epoch) const;
  // x of a batch of any other source, each sample made whole on the decode threads.
  torch::Tensor made_whole(const int64_t* id, int64_t count, int64_t epoch) const;
  // One sample of such a source, read, augmented and padded into `out` (contiguous
  // [C, H', W'] bytes), on a decode thread.
  void make_raw_sample(int64_t id, int64_t epoch, uint8_t* out) const;
  // The same sample normalised into `out` (contiguous [C, H', W'] floats).
  void make_sample(int64_t id, int64_t epoch, float* out) const;
  // fn(0..count-1) on the decode threads, or here without a pool.
  void run_samples(int64_t count, const std::function<void(int64_t)>& fn) const;
  // Augments `x` (uint8 [B, C, H, W], contiguous) in place, sample b using ids[b].
  void augment_in_place(torch::Tensor& x, const int64_t* ids, int64_t epoch) const;

  std::shared_ptr<const SampleSource> source_;
  LoaderOptions options_;
  int64_t in_height_;  // the size of a sample before padding
  int64_t in_width_;
  bool gather_;        // the source gathers samples at the output size in one copy
  std::shared_ptr<detail::DecodePool> pool_;  // shared by copies: it takes several callers
  int64_t out_height_;
  int64_t out_width_;
  std::optional<PixelNormalizer> normalizer_;  // set once the options are checked
};

// Produces batches [begin, end) of one epoch, in order, on a background thread into a bounded
// Channel of `depth` batches, so batch assembly overlaps with training.
//
// `loader` must outlive the Prefetcher. next() is meant for one consumer thread.
class Prefetcher {
 public:
  // Throws UsageError unless 0 <= begin <= end <= loader.batches_per_epoch(), epoch >= 0 and
  // depth >= 1.
  Prefetcher(const Loader& loader, int64_t epoch, int64_t begin, int64_t end, size_t depth = 4);
  // Closes the channel and joins the thread. Returns promptly (after at most the batch being
  // assembled) even if the consumer stopped early.
  ~Prefetcher();

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch, or nullopt after the last one. If the producer thread threw, the batches
  // made before it are returned first, then every call throws RuntimeError carrying the
  // epoch, the batch index and the original message.
  std::optional<Batch> next();

  // Images made per second of the producer's own work (time spent waiting for room in the
  // channel left out): the loader's rate, to set beside training's. 0 before a batch.
  double images_per_second() const;

 private:
  void produce();

  const Loader& loader_;
  const int64_t epoch_;
  const int64_t begin_;
  const int64_t end_;
  Channel<Batch> channel_;
  // Written by the producer before it closes the channel; read by the consumer only after
  // pop() returned nullopt, which the channel's mutex orders after the close.
  std::exception_ptr error_;
  int64_t failed_index_ = -1;
  std::atomic<int64_t> images_{0};
  std::atomic<int64_t> busy_ns_{0};
  std::thread thread_;
};

// compute_normalization (normalize.h) over the pixels `source` gives through a loader with
// `options` at its output size, without normalisation, augmentation, random crops or padding
// (for resized images: the centred squares), in one pass on options.threads threads.
Normalization compute_normalization(std::shared_ptr<const SampleSource> source, LoaderOptions options);

}  // namespace data
}  // namespace stalepipe
