#include "stalepipe/train/run_data.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "model_file.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/data/image_cache.h"

namespace stalepipe::train {
namespace fs = std::filesystem;
namespace {

const char kPathKey[] = "data_folder_path";
const char kFingerprintKey[] = "data_fingerprint";

}  // namespace

data::SourceSplit load_run_sources(const DataOptions& d, uint64_t seed, int threads,
                                   const std::optional<DataFolder>& recorded) {
  const auto spec = data::parse_dataset_spec(d.dataset());
  if (spec.name != "folder") return data::load_sources(d.dataset());
  const auto options = data::FolderOptions()
                           .val_fraction(d.val_fraction())
                           .seed(seed)
                           .max_megapixels(d.max_megapixels())
                           .skip_bad_images(d.skip_bad_images())
                           .threads(threads);
  const std::string dir = recorded ? recorded->path : spec.dir;
  data::SourceSplit sources = data::load_sources("folder:" + dir, options);
  SP_CHECK_ARG(!recorded || sources.scanned->fingerprint == recorded->fingerprint, "image folder ", dir,
               " has changed since the run started: its files now give \"", sources.scanned->fingerprint,
               "\", config.json records \"", recorded->fingerprint, "\"; restore the tree or start a new run");
  return sources;
}

data::LoaderOptions train_loader_options(const DataOptions& d, uint64_t seed, int data_threads, bool pin_memory) {
  return data::LoaderOptions()
      .batch_size(d.batch_size())
      .shuffle(true)
      .drop_last(d.drop_last())
      .seed(seed)
      .augment(d.augment())
      .pad_to(32)
      .image_size(d.image_size())
      .resized_crop(d.resized_crop())
      .threads(data_threads)
      .pin_memory(pin_memory);
}

namespace {

// The named losses take either class indices or float targets; say so before training starts.
void check_loss_fits(const exec::Loss& loss, const data::SampleSource& data) {
  const bool wants_classes = loss.name() == "cross-entropy" || loss.name() == "nll";
  if (loss.name() == "custom" || wants_classes == (data.num_classes() > 0)) return;
  throw UsageError(c10::str("OptimizerOptions::loss ", loss.name(), " needs ",
                            wants_classes ? "class indices" : "float targets", " but data set ", data.name(), " has ",
                            wants_classes ? "float regression targets; use mse, l1 or smooth-l1"
                                          : "class indices; use cross-entropy or nll"));
}

}  // namespace

RunData load_run_data(DataOptions& d, const exec::Loss& loss, uint64_t seed, int data_threads, bool pin_memory,
                      const std::optional<DataFolder>& recorded) {
  RunData run;
  run.sources = load_run_sources(d, seed, data_threads, recorded);
  data::SourceSplit& s = run.sources;
  if (s.scanned) run.folder = DataFolder{fs::absolute(s.scanned->dir).lexically_normal().string(), s.scanned->fingerprint};
  if (s.scanned && !d.cache_images().empty()) {
    // The same pixels, read instead of decoded; random resized crops need the full images.
    const auto options = train_loader_options(d, seed, data_threads, false);
    s.test = data::cached_source(s.scanned->test, data::LoaderOptions(options).resized_crop(false), d.cache_images());
    if (!d.resized_crop()) s.train = data::cached_source(s.scanned->train, options, d.cache_images());
  }
  if (d.train_subset() > 0) s.train = data::first_samples(s.train, std::min(d.train_subset(), s.train->size()));
  if (d.test_subset() > 0) s.test = data::first_samples(s.test, std::min(d.test_subset(), s.test->size()));
  check_loss_fits(loss, *s.train);
  auto options = train_loader_options(d, seed, data_threads, pin_memory);
  if (d.norm_mean().empty()) {
    const data::Normalization measured = data::compute_normalization(s.train, options);
    // An image folder's pass is costly: config.json keeps it for a resumed run.
    if (s.scanned) d.norm_mean(measured.mean).norm_std(measured.std);
    options.normalization(measured);
  } else {
    options.normalization({d.norm_mean(), d.norm_std()});
  }
  run.train_loader = std::make_unique<data::Loader>(s.train, options);
  run.test_loader = std::make_unique<data::Loader>(
      s.test, options.batch_size(d.eval_batch_size()).shuffle(false).drop_last(false).augment(false).resized_crop(false));
  return run;
}

int resolved_data_threads(const Options& o) {
  if (o.data().data_threads() > 0) return o.data().data_threads();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, cores - resolved_threads(o.pipeline()));
}

void add_data_folder(nlohmann::json& config, const DataFolder& folder) {
  config[kPathKey] = folder.path;
  config[kFingerprintKey] = folder.fingerprint;
}

std::optional<DataFolder> recorded_data_folder(const std::string& run_dir) {
  const auto recorded = recorded_pair(run_dir, kPathKey, kFingerprintKey);
  if (!recorded) return std::nullopt;
  return DataFolder{recorded->first, recorded->second};
}

void write_skipped_images(const std::string& run_dir, const RunData& data) {
  if (!data.sources.scanned || data.sources.scanned->skipped.empty()) return;
  std::string text;
  for (const auto& bad : data.sources.scanned->skipped) text += bad.fault + "\n";
  write_file_atomic((fs::path(run_dir) / "skipped-images.txt").string(), text);
}

}  // namespace stalepipe::train
