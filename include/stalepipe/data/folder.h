// Image folders as torchvision's ImageFolder reads them: DIR/<class>/**/<file>.jpg|.jpeg|.png,
// the classes being the sorted names of the class folders (byte order), a file's label the
// index of its class.
//
// Layouts: DIR/train/<class>/... with DIR/val/<class>/... (or DIR/test/) beside it; or one
// tree DIR/<class>/... split with a validation fraction F: in each class, the round(F * n)
// files whose hash of (seed, path) is lowest form the validation split, so adding a file to a
// class moves at most one other file across. Folders and files whose names start with '.'
// and files with other extensions are left out (torchvision leaves out other extensions too);
// symbolic links are followed, a link back to a folder above is an error.
//
// The scan, before any training: every file is read once, its header probed (a truncated file
// is found by its missing end marker) and its size recorded; with skip_bad_images every file
// is also decoded in full, and the unreadable ones are left out and listed instead of ending
// the run. Samples have 1 channel where every training image is stored gray, else 3.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "stalepipe/data/image.h"
#include "stalepipe/data/source.h"

namespace stalepipe {
namespace data {

struct FolderOptions {
  // > 0 (and < 1): split one tree DIR/<class>/ into training and validation.
  TORCH_ARG(double, val_fraction) = 0;
  TORCH_ARG(uint64_t, seed) = 0;  // of the split
  TORCH_ARG(double, max_megapixels) = kDefaultMaxMegapixels;
  // Leave out the files the scan cannot read (decoding each in full) instead of failing.
  TORCH_ARG(bool, skip_bad_images) = false;
  TORCH_ARG(int, threads) = 1;  // of the scan
};

struct ImageFile {
  std::string path;  // as found: DIR/... (DIR as given)
  int64_t label = 0;
  ImageInfo info;
  int64_t bytes = 0;     // the file's size
  int64_t mtime_ns = 0;  // and modification time, when scanned
};

struct BadImage {
  std::string path;
  std::string fault;  // the error's one line
};

// The files of one split, decoded when read.
class FolderSource : public SampleSource {
 public:
  FolderSource(std::string name, std::vector<ImageFile> files, int64_t channels, int64_t num_classes,
               double max_megapixels);

  const std::string& name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t channels() const override { return channels_; }
  int64_t num_classes() const override { return num_classes_; }
  const torch::Tensor& targets() const override { return labels_; }
  std::optional<std::pair<int64_t, int64_t>> common_size() const override { return common_size_; }
  torch::Tensor read(int64_t i, const RegionPicker& pick, int64_t min_height, int64_t min_width) const override;

  const std::vector<ImageFile>& files() const { return files_; }

 private:
  std::string name_;
  std::vector<ImageFile> files_;
  int64_t channels_;
  int64_t num_classes_;
  double max_megapixels_;
  torch::Tensor labels_;
  std::optional<std::pair<int64_t, int64_t>> common_size_;
};

struct Folder {
  std::string dir;  // DIR as given, without trailing slashes
  std::vector<std::string> classes;
  std::shared_ptr<const FolderSource> train;
  std::shared_ptr<const FolderSource> test;  // from val/ or test/, or the split
  std::vector<BadImage> skipped;             // with skip_bad_images
  // Of every file taken (relative path, size in bytes, modification time), so that a resumed
  // run can tell the tree changed: "files N, bytes B, crc32 XXXXXXXX".
  std::string fingerprint;
};

// Scans DIR as above. Throws UsageError for an impossible layout (no train/ and no fraction,
// a fraction with val/ present, a fraction outside (0, 1)); RuntimeError naming the file or
// folder for everything the scan finds (no classes, an empty class folder, a class only in
// val/, an unreadable or corrupt file, a symbolic-link loop, a name that is not UTF-8).
Folder scan_folder(const std::string& dir, const FolderOptions& options);

// What `stalepipe data inspect` shows: every class and split, whatever is wrong.
struct FolderReport {
  struct Split {
    std::string name;                     // "train", "val", "test" or "" (one tree)
    std::vector<int64_t> per_class;       // image files per class (readable or not), in class order
    std::vector<std::pair<std::string, int64_t>> modes;  // "PNG gray" -> count
    int64_t min_height = 0, max_height = 0, min_width = 0, max_width = 0;
    int64_t other_files = 0;              // files with other extensions, left out
  };
  std::vector<std::string> classes;
  std::vector<Split> splits;
  std::vector<BadImage> bad;  // every file that cannot be read, with its fault
  std::vector<std::string> problems;  // layout faults: empty class folders, classes only in val
};

// Scans DIR like scan_folder (decoding every file in full), collecting faults instead of
// throwing; throws only where DIR is no directory.
FolderReport inspect_folder(const std::string& dir, double max_megapixels = kDefaultMaxMegapixels, int threads = 1);

}  // namespace data
}  // namespace stalepipe
