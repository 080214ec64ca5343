// Data sets by name, as the CLI's --dataset flag spells them.
//
// Specs ("NAME" or "NAME:ARG"):
//   fashion-mnist           /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)
//   fashion-mnist:DIR       IDX files in DIR (raw or .gz)
//   mnist:DIR, kmnist:DIR   IDX files in DIR (raw or .gz)
//   cifar10:DIR             CIFAR-10 binary batches in DIR or DIR/cifar-10-batches-bin
//   synthetic               make_synthetic() with default options (2048 train, 512 test, 1x28x28)
//   synthetic:N             N train samples and max(1, N/4) test samples
//   synthetic-regression[:N] the same images, each with a regression target instead of a
//                           class: its mean pixel value in [0, 1], float [N, 1] (num_classes 0)
//   synthetic-masks[:N]     make_synthetic_masks() at 1x32x32 in 4 classes: a class per pixel,
//                           int64 [N, 32, 32] (for the zoo's unet)
//   folder:DIR              JPEG and PNG images in class folders (data/folder.h), decoded
//                           as batches need them: load_sources only
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/data/dataset.h"
#include "stalepipe/data/folder.h"
#include "stalepipe/data/source.h"

namespace stalepipe {
namespace data {

constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// A spec as parsed, before anything is read from disk.
struct DatasetSpec {
  std::string name;             // one of dataset_names()
  std::string dir;              // the files' directory; "" for synthetic and synthetic-regression
  int64_t synthetic_train = 0;  // N of synthetic[-regression|-masks]:N; 0 for the default size
};

// Parses `spec` (the disk is not touched). Throws UsageError as load_dataset does.
DatasetSpec parse_dataset_spec(const std::string& spec);

// Loads the data set named by `spec` into memory. Throws UsageError for an unknown name
// (listing the valid ones), a missing DIR where one is required, a bad N, or folder:DIR (see
// load_sources); RuntimeError when DIR does not exist or its files are missing or corrupt.
DataSplit load_dataset(const std::string& spec);

// Any data set as sources: the in-memory ones as TensorSources, folder:DIR scanned with
// `folder` (then `scanned` holds the scan: classes, fingerprint, skipped files).
struct SourceSplit {
  std::shared_ptr<const SampleSource> train;
  std::shared_ptr<const SampleSource> test;
  std::optional<Folder> scanned;
};
SourceSplit load_sources(const std::string& spec, const FolderOptions& folder = {});

// The valid names, in the order the help text lists them.
std::vector<std::string> dataset_names();
// Each name with what follows it, for help texts: "fashion-mnist[:DIR] | mnist:DIR | ... |
// synthetic[:N] | ...".
std::string dataset_choices();

}  // namespace data
}  // namespace stalepipe
