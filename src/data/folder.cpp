#include "stalepipe/data/folder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>

#include "data/folder_impl.h"
#include "data/random_impl.h"
#include "stalepipe/common/crc32.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

namespace fs = std::filesystem;

bool is_dir(const std::string& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

// The validation split's folder beside DIR/train: val/, else test/; "" if neither.
std::string held_out_folder(const std::string& dir) {
  for (const char* name : {"val", "test"}) {
    if (is_dir(dir + "/" + name)) return name;
  }
  return "";
}

// FNV-1a: a path's hash for the split, the same on every platform.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// The files of one tree as training and validation halves: per class, the round(F * n) of
// lowest hash of (seed, path below DIR) go to validation.
std::pair<std::vector<std::vector<std::string>>, std::vector<std::vector<std::string>>> split_tree(
    const detail::ClassTree& tree, double fraction, uint64_t seed) {
  std::vector<std::vector<std::string>> train(tree.files.size()), val(tree.files.size());
  const uint64_t stream = detail::mix_seed(seed, detail::kSplitStream);
  for (size_t c = 0; c < tree.files.size(); ++c) {
    const auto& files = tree.files[c];
    std::vector<std::pair<uint64_t, size_t>> keyed;
    for (size_t i = 0; i < files.size(); ++i) {
      keyed.emplace_back(detail::mix_seed(stream, fnv1a(files[i].substr(tree.root.size() + 1))), i);
    }
    std::sort(keyed.begin(), keyed.end());
    const auto held = static_cast<size_t>(std::llround(fraction * static_cast<double>(files.size())));
    std::vector<bool> to_val(files.size(), false);
    for (size_t k = 0; k < held; ++k) to_val[keyed[k].second] = true;
    for (size_t i = 0; i < files.size(); ++i) (to_val[i] ? val : train)[c].push_back(files[i]);
  }
  return {train, val};
}

// One split's files with their probes; bad ones go to `skipped` or end the scan.
std::vector<ImageFile> probe_split(const std::vector<std::vector<std::string>>& per_class,
                                   const std::string& dir, const FolderOptions& options,
                                   std::vector<BadImage>& skipped, std::string& fingerprint_text, int64_t& bytes) {
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  for (size_t c = 0; c < per_class.size(); ++c) {
    for (const auto& f : per_class[c]) {
      paths.push_back(f);
      labels.push_back(static_cast<int64_t>(c));
    }
  }
  const auto probed = detail::probe_files(paths, options.max_megapixels(), options.skip_bad_images(), options.threads());
  std::vector<ImageFile> files;
  std::vector<const detail::Probed*> bad;
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto& p = probed[i];
    if (!p.ok) {
      bad.push_back(&p);
      skipped.push_back({paths[i], p.fault});
      continue;
    }
    files.push_back({paths[i], labels[i], p.info, p.bytes, p.mtime_ns});
    // Below DIR, so that another spelling of DIR gives the same fingerprint.
    fingerprint_text += c10::str(paths[i].substr(dir.size() + 1), '\t', p.bytes, '\t', p.mtime_ns, '\n');
    bytes += p.bytes;
  }
  SP_CHECK(bad.empty() || options.skip_bad_images(), bad.front()->fault,
           bad.size() > 1 ? c10::str(" (and ", bad.size() - 1, " more unreadable files)") : std::string(),
           "; DataOptions::skip_bad_images leaves unreadable files out");
  return files;
}

void check_classes_nonempty(const std::string& root, const std::vector<std::string>& classes,
                            const std::vector<std::vector<std::string>>& files) {
  SP_CHECK(!classes.empty(), root, ": no class folders (expected ", root, "/<class>/<image>.jpg|.png)");
  for (size_t c = 0; c < classes.size(); ++c) {
    SP_CHECK(!files[c].empty(), root, "/", classes[c], ": empty class folder (no .jpg, .jpeg or .png files)");
  }
}

// One split for inspect_folder: counts per class, image kinds and sizes, and every fault.
FolderReport::Split inspect_split(const std::string& root, const std::string& name, FolderReport& report,
                                  double max_megapixels, int threads) {
  FolderReport::Split split;
  split.name = name;
  split.per_class.assign(report.classes.size(), 0);
  detail::ClassTree tree;
  try {
    tree = detail::list_tree(root);
  } catch (const std::exception& e) {
    report.problems.push_back(e.what());
    return split;
  }
  split.other_files = tree.other_files;
  std::vector<std::string> paths;
  for (size_t c = 0; c < tree.classes.size(); ++c) {
    const auto it = std::lower_bound(report.classes.begin(), report.classes.end(), tree.classes[c]);
    if (it == report.classes.end() || *it != tree.classes[c]) {
      report.problems.push_back(c10::str(root, "/", tree.classes[c], ": class '", tree.classes[c], "' is not in the training split"));
    } else {
      split.per_class[it - report.classes.begin()] = static_cast<int64_t>(tree.files[c].size());
    }
    if (tree.files[c].empty()) report.problems.push_back(c10::str(root, "/", tree.classes[c], ": empty class folder"));
    paths.insert(paths.end(), tree.files[c].begin(), tree.files[c].end());
  }
  std::map<std::string, int64_t> modes;
  bool first = true;
  const auto probed = detail::probe_files(paths, max_megapixels, true, threads);
  for (size_t i = 0; i < probed.size(); ++i) {
    const detail::Probed& p = probed[i];
    if (!p.ok) {
      report.bad.push_back({paths[i], p.fault});
      continue;
    }
    ++modes[c10::str(to_string(p.info.format), " ", p.info.mode)];
    split.min_height = first ? p.info.height : std::min(split.min_height, p.info.height);
    split.max_height = std::max(split.max_height, p.info.height);
    split.min_width = first ? p.info.width : std::min(split.min_width, p.info.width);
    split.max_width = std::max(split.max_width, p.info.width);
    first = false;
  }
  split.modes.assign(modes.begin(), modes.end());
  return split;
}

}  // namespace

FolderSource::FolderSource(std::string name, std::vector<ImageFile> files, int64_t channels, int64_t num_classes,
                           double max_megapixels)
    : name_(std::move(name)), files_(std::move(files)), channels_(channels), num_classes_(num_classes),
      max_megapixels_(max_megapixels) {
  SP_CHECK_ARG(channels_ == 1 || channels_ == 3, "image folder '", name_, "': channels must be 1 or 3, got ", channels_);
  labels_ = torch::empty({size()}, torch::kInt64);
  int64_t* label = labels_.data_ptr<int64_t>();
  for (int64_t i = 0; i < size(); ++i) label[i] = files_[i].label;
  if (!files_.empty()) common_size_ = std::make_pair(files_[0].info.height, files_[0].info.width);
  for (const auto& f : files_) {
    if (common_size_ && (f.info.height != common_size_->first || f.info.width != common_size_->second)) {
      common_size_.reset();
    }
  }
}

torch::Tensor FolderSource::read(int64_t i, const RegionPicker& pick, int64_t min_height, int64_t min_width) const {
  SP_CHECK_ARG(i >= 0 && i < size(), "image folder '", name_, "': sample ", i, " is out of range 0..", size() - 1);
  const ImageFile& f = files_[i];
  const std::vector<uint8_t> bytes = detail::read_image_file(f.path, max_megapixels_);
  const ImageInfo info = probe_image(bytes.data(), bytes.size(), f.path, max_megapixels_);
  SP_CHECK(info.height == f.info.height && info.width == f.info.width, f.path, ": now ", info.height, "x", info.width,
           " pixels, ", f.info.height, "x", f.info.width, " when the folder was scanned; the file changed");
  const Region region = pick(info.height, info.width);
  return decode_image(bytes.data(), bytes.size(), f.path, channels_, region, min_height, min_width, max_megapixels_);
}

// DIR without trailing slashes.
std::string trimmed(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

Folder scan_folder(const std::string& given, const FolderOptions& options) {
  const std::string dir = trimmed(given);
  SP_CHECK(is_dir(dir), dir, ": image folder does not exist (expected DIR/train/<class>/<image> or DIR/<class>/<image>)");
  const double fraction = options.val_fraction();
  SP_CHECK_ARG(fraction >= 0 && fraction < 1, "validation fraction must be in [0, 1), got ", fraction);
  const bool one_tree = !is_dir(dir + "/train");
  const std::string held_out = one_tree ? "" : held_out_folder(dir);
  SP_CHECK_ARG(!one_tree || fraction > 0, dir, ": no train/ folder; give a validation fraction "
               "(DataOptions::val_fraction) to split the class folders there, or add train/ and val/");
  SP_CHECK_ARG(one_tree || fraction > 0 || !held_out.empty(), dir, "/train has no val/ or test/ beside it; add one "
               "or give a validation fraction (DataOptions::val_fraction) to split train/");
  SP_CHECK_ARG(held_out.empty() || fraction == 0, dir, " has ", held_out, "/ beside train/; a validation fraction "
               "would split train/ as well: leave it out");

  const detail::ClassTree train_tree = detail::list_tree(one_tree ? dir : dir + "/train");
  check_classes_nonempty(train_tree.root, train_tree.classes, train_tree.files);
  Folder out;
  out.dir = dir;
  out.classes = train_tree.classes;
  std::vector<std::vector<std::string>> train_files = train_tree.files, test_files;
  if (fraction > 0) {
    std::tie(train_files, test_files) = split_tree(train_tree, fraction, options.seed());
  } else {
    const detail::ClassTree test_tree = detail::list_tree(dir + "/" + held_out);
    test_files.assign(out.classes.size(), {});
    for (size_t c = 0; c < test_tree.classes.size(); ++c) {
      const auto it = std::lower_bound(out.classes.begin(), out.classes.end(), test_tree.classes[c]);
      SP_CHECK(it != out.classes.end() && *it == test_tree.classes[c], test_tree.root, "/", test_tree.classes[c],
               ": class '", test_tree.classes[c], "' is not in ", train_tree.root);
      test_files[it - out.classes.begin()] = test_tree.files[c];
    }
  }
  std::string fingerprint_text;
  int64_t bytes = 0;
  auto train = probe_split(train_files, dir, options, out.skipped, fingerprint_text, bytes);
  auto test = probe_split(test_files, dir, options, out.skipped, fingerprint_text, bytes);
  SP_CHECK(!train.empty(), train_tree.root, ": no readable training image");
  SP_CHECK(!test.empty(), dir, ": no validation image", fraction > 0 ? " (the validation fraction is too small)" : "");
  const bool color = std::any_of(train.begin(), train.end(), [](const ImageFile& f) { return f.info.color; });
  const auto classes = static_cast<int64_t>(out.classes.size());
  const size_t files = train.size() + test.size();
  const std::string base = fs::path(dir).filename().string();
  out.train = std::make_shared<FolderSource>(base + "/train", std::move(train), color ? 3 : 1, classes,
                                             options.max_megapixels());
  out.test = std::make_shared<FolderSource>(base + (held_out.empty() ? "/val" : "/" + held_out), std::move(test),
                                            color ? 3 : 1, classes, options.max_megapixels());
  out.fingerprint = c10::str("files ", files, ", bytes ", bytes, ", crc32 ", crc32_hex(crc32_of(fingerprint_text)));
  return out;
}

FolderReport inspect_folder(const std::string& given, double max_megapixels, int threads) {
  const std::string dir = trimmed(given);
  SP_CHECK(is_dir(dir), dir, ": image folder does not exist");
  FolderReport report;
  const bool one_tree = !is_dir(dir + "/train");
  const std::string train_root = one_tree ? dir : dir + "/train";
  try {
    report.classes = detail::list_tree(train_root).classes;
  } catch (const std::exception& e) {
    report.problems.push_back(e.what());
  }
  if (report.classes.empty()) report.problems.push_back(c10::str(train_root, ": no class folders"));
  report.splits.push_back(inspect_split(train_root, one_tree ? "" : "train", report, max_megapixels, threads));
  for (const char* name : {"val", "test"}) {
    if (!one_tree && is_dir(dir + "/" + name)) {
      report.splits.push_back(inspect_split(dir + "/" + name, name, report, max_megapixels, threads));
    }
  }
  return report;
}

}  // namespace data
}  // namespace stalepipe
