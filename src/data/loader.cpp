#include "stalepipe/data/loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "data/random_impl.h"
#include "data/decode_pool_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/slices.h"
#include "stalepipe/data/resample.h"

namespace stalepipe {
namespace data {

Loader::Loader(Dataset data, LoaderOptions options)
    : Loader(std::make_shared<TensorSource>(std::move(data)), std::move(options)) {}

Loader::~Loader() = default;

Loader::Loader(std::shared_ptr<const SampleSource> source, LoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  SP_CHECK_ARG(source_, "loader: no data source");
  const std::string& name = source_->name();
  const int64_t batch_size = options_.batch_size();
  SP_CHECK_ARG(batch_size >= 1, "batch size must be >= 1, got ", batch_size);
  SP_CHECK_ARG(source_->size() >= 1, "data set '", name, "' is empty; the loader needs at "
      "least one sample");
  check_targets(*source_);
  SP_CHECK_ARG(options_.pad_to() >= 0, "pad_to must be >= 0 (0: no padding), got ",
      options_.pad_to());
  SP_CHECK_ARG(options_.image_size() >= 0, "image size must be >= 0 (0: as stored), got ", options_.image_size());
  SP_CHECK_ARG(options_.threads() >= 1, "loader threads must be >= 1, got ", options_.threads());
  SP_CHECK_ARG(options_.shard_count() >= 1 && options_.shard_index() >= 0 &&
                   options_.shard_index() < options_.shard_count(),
               "loader shard ", options_.shard_index(), " of ", options_.shard_count(),
               ": need 0 <= shard_index < shard_count");
  SP_CHECK_ARG(!options_.drop_last() || source_->size() >= batch_size, "drop_last with batch size ",
      batch_size, " leaves no batch: data set '", name, "' has only ", source_->size(),
      " samples; use a smaller batch size or keep the last partial batch");
  const auto stored = source_->common_size();
  const int64_t size = options_.image_size();
  SP_CHECK_ARG(size > 0 || stored, "data set '", name, "': its images differ in size; give an image size to "
      "resize them to");
  in_height_ = size > 0 ? size : stored->first;
  in_width_ = size > 0 ? size : stored->second;
  gather_ = source_->gathers() && !options_.resized_crop() && stored &&
      stored->first == in_height_ && stored->second == in_width_;
  if (!gather_ && options_.threads() > 1) pool_ = std::make_shared<detail::DecodePool>(options_.threads());

  normalizer_.emplace(options_.normalization(), source_->channels(), name);
  out_height_ = std::max(in_height_, options_.pad_to());
  out_width_ = std::max(in_width_, options_.pad_to());
  SP_CHECK_ARG(source_->targets().dim() != 3 || (!options_.augment() && !options_.resized_crop() &&
                   size == 0 && out_height_ == in_height_ && out_width_ == in_width_),
               "data set '", name, "' has a class per pixel: its images cannot be augmented, cropped, resized or "
               "padded (the targets would not follow)");
}

int64_t Loader::batches_per_epoch() const {
  const int64_t n = source_->size(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> Loader::epoch_order(int64_t epoch) const {
  SP_CHECK_ARG(epoch >= 0, "epoch must be >= 0, got ", epoch);
  std::vector<int64_t> order(source_->size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!options_.shuffle()) {
    return order;
  }
  std::mt19937_64 rng(detail::mix_seed(
      detail::mix_seed(options_.seed(), detail::kShuffleStream), static_cast<uint64_t>(epoch)));
  for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

Batch Loader::batch(int64_t epoch, int64_t index) const {
  return batch(epoch, index, epoch_order(epoch));
}

Batch Loader::batch(int64_t epoch, int64_t index, const std::vector<int64_t>& order) const {
  const int64_t n = source_->size();
  SP_CHECK_ARG(epoch >= 0, "epoch must be >= 0, got ", epoch);
  SP_CHECK_ARG(static_cast<int64_t>(order.size()) == n, "batch ", index, " of epoch ", epoch,
      ": expected an order of ", n, " sample ids, found ", order.size());
  SP_CHECK_ARG(index >= 0 && index < batches_per_epoch(), "batch index ", index, " of epoch ",
      epoch, " is out of range 0..", batches_per_epoch() - 1);

  const int64_t first = index * options_.batch_size();
  const int64_t samples = std::min(options_.batch_size(), n - first);
  const int shards = options_.shard_count();
  SP_CHECK_ARG(samples >= shards, "batch ", index, " of epoch ", epoch, " has ", samples, " samples, fewer than the ",
               shards, " shards it is split into; drop the last batch or choose another batch size");
  const auto [slice_begin, slice_end] = slice_range(samples, shards, options_.shard_index());
  const int64_t begin = first + slice_begin;
  const int64_t count = slice_end - slice_begin;
  torch::Tensor ids = torch::empty({count}, torch::kInt64);
  int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    id[i] = order[begin + i];
    SP_CHECK_ARG(id[i] >= 0 && id[i] < n, "batch ", index, " of epoch ", epoch, ": sample id ",
        id[i], " at position ", begin + i, " of the order is out of range 0..", n - 1);
  }

  Batch out;
  out.epoch = epoch;
  out.index = index;
  out.samples = samples;
  const bool pinned = options_.pin_memory();
  if (gather_) {
    torch::Tensor raw = gathered(ids, epoch);
    out.x = options_.raw_pixels() ? (pinned && !raw.is_pinned() ? raw.pin_memory() : raw) : (*normalizer_)(raw, pinned);
  } else {
    out.x = made_whole(id, count, epoch);
  }
  out.y = source_->targets().index_select(0, ids);
  if (pinned) out.y = out.y.pin_memory();
  return out;
}

torch::Tensor Loader::pixels(const torch::Tensor& ids, int64_t epoch) const {
  if (gather_) return source_->gather(ids).contiguous();
  const int64_t count = ids.size(0);
  torch::Tensor x = torch::empty({count, source_->channels(), in_height_, in_width_}, torch::kUInt8);
  const int64_t* id = ids.data_ptr<int64_t>();
  uint8_t* base = x.data_ptr<uint8_t>();
  const int64_t sample_bytes = x.stride(0);
  run_samples(count, [&](int64_t b) { read_sample(id[b], epoch, base + b * sample_bytes); });
  return x;
}

torch::Tensor Loader::made_whole(const int64_t* id, int64_t count, int64_t epoch) const {
  const bool raw = options_.raw_pixels();
  torch::Tensor x = torch::empty({count, source_->channels(), out_height_, out_width_},
                                 torch::TensorOptions(raw ? torch::kUInt8 : torch::kFloat32).pinned_memory(options_.pin_memory()));
  const int64_t stride = x.stride(0);
  if (raw) {
    uint8_t* base = x.data_ptr<uint8_t>();
    run_samples(count, [&](int64_t b) { make_raw_sample(id[b], epoch, base + b * stride); });
  } else {
    float* base = x.data_ptr<float>();
    run_samples(count, [&](int64_t b) { make_sample(id[b], epoch, base + b * stride); });
  }
  return x;
}

void Loader::run_samples(int64_t count, const std::function<void(int64_t)>& fn) const {
  if (pool_) {
    pool_->run(count, fn);
  } else {
    for (int64_t b = 0; b < count; ++b) fn(b);
  }
}

torch::Tensor Loader::gathered(const torch::Tensor& ids, int64_t epoch) const {
  torch::Tensor x = pixels(ids, epoch);  // uint8, contiguous
  if (options_.augment()) {
    augment_in_place(x, ids.data_ptr<int64_t>(), epoch);
  }
  const int64_t count = ids.size(0), height = in_height_, width = in_width_;
  if (out_height_ != height || out_width_ != width) {
    // Pad raw pixels with 0 so the pad reads (0 - mean) / std after normalisation.
    torch::Tensor padded = torch::zeros({count, source_->channels(), out_height_, out_width_},
                                        torch::TensorOptions(torch::kUInt8).pinned_memory(options_.pin_memory()));
    padded.narrow(2, (out_height_ - height) / 2, height)
        .narrow(3, (out_width_ - width) / 2, width)
        .copy_(x);
    x = padded;
  }
  return x;
}

void Loader::make_raw_sample(int64_t id, int64_t epoch, uint8_t* out) const {
  const int64_t channels = source_->channels(), height = in_height_, width = in_width_;
  const bool padded = out_height_ != height || out_width_ != width;
  thread_local std::vector<uint8_t> buffer;
  if (padded) buffer.resize(static_cast<size_t>(channels * height * width));
  uint8_t* sample = padded ? buffer.data() : out;
  read_sample(id, epoch, sample);
  if (options_.augment()) {
    torch::Tensor view = torch::from_blob(sample, {1, channels, height, width}, torch::kUInt8);
    augment_in_place(view, &id, epoch);
  }
  if (!padded) return;
  const int64_t top = (out_height_ - height) / 2, left = (out_width_ - width) / 2;
  std::memset(out, 0, static_cast<size_t>(channels * out_height_ * out_width_));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      std::memcpy(out + (c * out_height_ + top + y) * out_width_ + left, sample + (c * height + y) * width,
                  static_cast<size_t>(width));
    }
  }
}

void Loader::make_sample(int64_t id, int64_t epoch, float* out) const {
  const int64_t plane_size = out_height_ * out_width_;
  thread_local std::vector<uint8_t> pixels;
  pixels.resize(static_cast<size_t>(source_->channels() * plane_size));
  make_raw_sample(id, epoch, pixels.data());
  normalizer_->normalize_sample(pixels.data(), plane_size, out);
}

void Loader::read_sample(int64_t id, int64_t epoch, uint8_t* out) const {
  const int64_t channels = source_->channels(), height = in_height_, width = in_width_;
  // Seeded by the sample id, so the draw depends on neither the batch nor the thread; seeded
  // (2.5 KB of state) only where random crops draw from it.
  std::optional<std::mt19937_64> rng;
  RegionPicker pick;
  if (options_.resized_crop()) {
    rng.emplace(detail::mix_seed(detail::mix_seed(detail::mix_seed(options_.seed(), detail::kCropStream),
                                                  static_cast<uint64_t>(epoch)), static_cast<uint64_t>(id)));
    pick = [&rng](int64_t h, int64_t w) { return random_resized_crop(h, w, *rng); };
  } else if (options_.image_size() > 0) {
    pick = centre_square;
  } else {
    pick = [](int64_t h, int64_t w) { return Region{0, 0, h, w}; };
  }
  const torch::Tensor image = source_->read(id, pick, height, width);
  check_sample(*source_, id, image);
  if (image.size(1) == height && image.size(2) == width) {
    torch::from_blob(out, {channels, height, width}, torch::kUInt8).copy_(image);
  } else {
    SP_CHECK(options_.image_size() > 0 || options_.resized_crop(), "data set '", source_->name(), "': sample ", id,
             " is ", image.size(1), "x", image.size(2), ", not ", height, "x", width, " as the others");
    resize_bilinear(image, height, width, out);
  }
  if (rng && ((*rng)() >> 63) != 0) flip_horizontal(out, channels, height, width);
}

void Loader::augment_in_place(torch::Tensor& x, const int64_t* ids, int64_t epoch) const {
  const int64_t count = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t plane = height * width;
  const int64_t sample_bytes = channels * plane;
  const uint64_t epoch_seed = detail::mix_seed(
      detail::mix_seed(options_.seed(), detail::kAugmentStream), static_cast<uint64_t>(epoch));
  std::vector<uint8_t> source(sample_bytes);
  uint8_t* data = x.data_ptr<uint8_t>();
  for (int64_t b = 0; b < count; ++b) {
    // Seeded by the sample id, so the result depends on neither the batch nor the thread.
    std::mt19937_64 rng(detail::mix_seed(epoch_seed, static_cast<uint64_t>(ids[b])));
    // Pad kAugmentPad and crop at offset (oy, ox) in 0..2*kAugmentPad: a shift by offset - pad.
    const int64_t dy = static_cast<int64_t>(detail::uniform_below(rng, 2 * kAugmentPad + 1)) -
        kAugmentPad;
    const int64_t dx = static_cast<int64_t>(detail::uniform_below(rng, 2 * kAugmentPad + 1)) -
        kAugmentPad;
    const bool flip = (rng() >> 63) != 0;
    uint8_t* sample = data + b * sample_bytes;
    std::memcpy(source.data(), sample, sample_bytes);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t y = 0; y < height; ++y) {
        uint8_t* row = sample + c * plane + y * width;
        const int64_t sy = y + dy;
        if (sy < 0 || sy >= height) {
          std::memset(row, 0, width);
          continue;
        }
        const uint8_t* source_row = source.data() + c * plane + sy * width;
        for (int64_t col = 0; col < width; ++col) {
          const int64_t sx = (flip ? width - 1 - col : col) + dx;
          row[col] = (sx >= 0 && sx < width) ? source_row[sx] : 0;
        }
      }
    }
  }
}

std::vector<int64_t> Loader::output_shape() const {
  return {source_->channels(), out_height_, out_width_};
}

}  // namespace data
}  // namespace stalepipe
