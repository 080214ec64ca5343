#include "stalepipe/data/folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/registry.h"
#include "support/data_files.h"
#include "support/image_tree.h"
#include "support/temp_dir.h"

namespace stalepipe::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::throws_with;

TEST(Folder, ReadsClassesInSortedOrderWithTheirLabelsAndPixels) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {2, 3, 1});
  test::write_tree(dir.path(), "val", {1, 1, 1});
  const Folder f = scan_folder(dir.path(), FolderOptions());
  EXPECT_EQ(f.classes, (std::vector<std::string>{"c0", "c1", "c2"}));
  ASSERT_EQ(f.train->size(), 6);
  ASSERT_EQ(f.test->size(), 3);
  EXPECT_TRUE(torch::equal(f.train->targets(), torch::tensor({0, 0, 1, 1, 1, 2}, torch::kInt64)));
  EXPECT_EQ(f.train->channels(), 1);
  EXPECT_EQ(f.train->common_size(), std::make_pair(int64_t{8}, int64_t{8}));
  const RegionPicker whole = [](int64_t h, int64_t w) { return Region{0, 0, h, w}; };
  // Sample 3 is class 1's second file, "1.png".
  EXPECT_TRUE(torch::equal(f.train->read(3, whole, 0, 0), test::pattern_image(1, 8, 8, 1001)));
  EXPECT_EQ(f.train->name(), fs::path(dir.path()).filename().string() + "/train");
}

TEST(Folder, ColourAnywhereInTrainingMakesThreeChannelsAndGrayIsReplicated) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {2, 2});
  test::write_image(dir.file("train/c1/rgb.png"), test::pattern_image(3, 8, 8, 5));
  test::write_tree(dir.path(), "test", {1, 1});
  const Folder f = scan_folder(dir.path(), FolderOptions());
  EXPECT_EQ(f.train->channels(), 3);
  const RegionPicker whole = [](int64_t h, int64_t w) { return Region{0, 0, h, w}; };
  const torch::Tensor gray = f.train->read(0, whole, 0, 0);
  ASSERT_EQ(gray.sizes(), torch::IntArrayRef({3, 8, 8}));
  EXPECT_TRUE(torch::equal(gray[0], gray[2]));
}

TEST(Folder, AValidationFractionSplitsEachClassStablyWhenFilesAreAdded) {
  TempDir dir;
  test::write_tree(dir.path(), "all", {40, 20});
  const auto split = [&](uint64_t seed) {
    const Folder f = scan_folder(dir.file("all"), FolderOptions().val_fraction(0.25).seed(seed));
    std::set<std::string> val;
    for (const auto& file : f.test->files()) val.insert(file.path);
    return std::make_pair(f, val);
  };
  const auto [f, val] = split(7);
  EXPECT_EQ(f.train->size(), 45);
  EXPECT_EQ(f.test->size(), 15);  // round(0.25 * 40) + round(0.25 * 20)
  EXPECT_EQ(split(7).second, val);
  EXPECT_NE(split(8).second, val);
  // One more file in class 0: at most one file of the old validation set moves out.
  test::write_image(dir.file("all/c0/extra.png"), test::pattern_image(1, 8, 8, 99));
  const auto after = split(7).second;
  size_t kept = 0;
  for (const auto& p : val) kept += after.count(p);
  EXPECT_GE(kept, val.size() - 1);
}

TEST(Folder, TheFingerprintChangesWhenAFileChangesOrIsAdded) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {2, 2});
  test::write_tree(dir.path(), "val", {1, 1});
  const std::string before = scan_folder(dir.path(), FolderOptions()).fingerprint;
  EXPECT_EQ(scan_folder(dir.path() + "/", FolderOptions()).fingerprint, before);
  test::write_image(dir.file("train/c0/new.png"), test::pattern_image(1, 8, 8, 3));
  const std::string added = scan_folder(dir.path(), FolderOptions()).fingerprint;
  EXPECT_NE(added, before);
  fs::last_write_time(dir.file("train/c0/0.png"), fs::last_write_time(dir.file("train/c0/0.png")) + std::chrono::seconds(5));
  EXPECT_NE(scan_folder(dir.path(), FolderOptions()).fingerprint, added);
}

TEST(Folder, LayoutFaultsAreNamed) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {1, 1});
  EXPECT_TRUE(throws_with<UsageError>([&] { scan_folder(dir.path(), FolderOptions()); }, {"has no val/ or test/"}));
  EXPECT_TRUE(throws_with<UsageError>([&] { scan_folder(dir.file("train"), FolderOptions()); }, {"no train/ folder"}));
  test::write_tree(dir.path(), "val", {1, 1, 1});
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.path(), FolderOptions()); }, {"class 'c2' is not in"}));
  EXPECT_TRUE(throws_with<UsageError>([&] { scan_folder(dir.path(), FolderOptions().val_fraction(0.5)); }, {"has val/"}));
  fs::create_directories(dir.file("empty/train/a"));
  fs::create_directories(dir.file("empty/val/a"));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.file("empty"), FolderOptions()); },
                                        {"train/a: empty class folder"}));
  fs::create_directories(dir.file("none/train"));
  fs::create_directories(dir.file("none/val"));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.file("none"), FolderOptions()); }, {"no class folders"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.file("missing"), FolderOptions()); }, {"does not exist"}));
}

// Each bad file alone in an otherwise good tree: the scan names it; skip_bad_images leaves
// it out and lists it.
TEST(Folder, BadFilesAreNamedOrSkipped) {
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> bad = {
      {"empty file", [](const std::string& p) { test::write_text(p, ""); }},
      {"not a JPEG or PNG", [](const std::string& p) { test::write_text(p, "<html>hello</html>"); }},
      {"truncated", [](const std::string& p) {
         auto bytes = encode_png(test::pattern_image(1, 8, 8, 1));
         bytes.resize(bytes.size() / 2);
         test::write_bytes(p, bytes);
       }},
  };
  for (const auto& [what, write] : bad) {
    TempDir dir;
    test::write_tree(dir.path(), "train", {2, 2});
    test::write_tree(dir.path(), "val", {1, 1});
    const std::string path = dir.file("train/c1/bad.png");
    write(path);
    EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.path(), FolderOptions()); }, {path})) << what;
    const Folder f = scan_folder(dir.path(), FolderOptions().skip_bad_images(true));
    EXPECT_EQ(f.train->size(), 4) << what;
    ASSERT_EQ(f.skipped.size(), 1u) << what;
    EXPECT_EQ(f.skipped[0].path, path) << what;
  }
}

TEST(Folder, ASymbolicLinkLoopAndANameThatIsNotUtf8AreNamed) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {1, 1});
  test::write_tree(dir.path(), "val", {1, 1});
  fs::create_directory_symlink("..", dir.file("train/c0/loop"));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.path(), FolderOptions()); }, {"symbolic link loop"}));
  fs::remove(dir.file("train/c0/loop"));
  test::write_image(dir.file("train/c1/caf\xe9.png"), test::pattern_image(1, 8, 8, 1));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.path(), FolderOptions()); }, {"caf\\xe9.png: the name is not UTF-8"}));
}

TEST(Folder, AnUnreadableFileIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every file";
  TempDir dir;
  test::write_tree(dir.path(), "train", {1, 1});
  test::write_tree(dir.path(), "val", {1, 1});
  ::chmod(dir.file("train/c0/0.png").c_str(), 0);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { scan_folder(dir.path(), FolderOptions()); }, {"Permission denied"}));
}

TEST(Folder, InspectListsEveryFaultWithoutThrowing) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {2, 3});
  test::write_tree(dir.path(), "val", {1, 1, 1});
  test::write_text(dir.file("train/c0/bad.png"), "nope");
  test::write_text(dir.file("train/c1/notes.txt"), "left out");
  const FolderReport r = inspect_folder(dir.path());
  EXPECT_EQ(r.classes, (std::vector<std::string>{"c0", "c1"}));
  ASSERT_EQ(r.splits.size(), 2u);
  EXPECT_EQ(r.splits[0].per_class, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(r.splits[0].other_files, 1);
  ASSERT_EQ(r.bad.size(), 1u);
  EXPECT_EQ(r.bad[0].path, dir.file("train/c0/bad.png"));
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("class 'c2' is not in the training split"), std::string::npos);
}

// A folder's batches are a pure function of (seed, epoch, index): the same whatever the
// number of decode threads, and, read at the stored size, the same pixels as in memory.
TEST(FolderLoader, BatchesDoNotDependOnTheThreadsAndEqualTheImagesInMemory) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {5, 6, 7}, 3, 12, 10);
  test::write_tree(dir.path(), "val", {1, 1, 1}, 3, 12, 10);
  const Folder f = scan_folder(dir.path(), FolderOptions());
  const Normalization norm{{0.5, 0.4, 0.3}, {0.2, 0.3, 0.4}};
  const Dataset preloaded = preload(*f.train, 2);
  // Read and normalised sample by sample, or gathered and normalised as a batch: the same bits,
  // with and without normalisation, augmentation and padding.
  for (const auto& options : {LoaderOptions().batch_size(7).seed(3).normalization(norm),
                              LoaderOptions().batch_size(7).seed(3),
                              LoaderOptions().batch_size(7).seed(3).normalization(norm).augment(true).pad_to(16)}) {
    const Loader one(f.train, LoaderOptions(options).threads(1));
    const Loader three(f.train, LoaderOptions(options).threads(3));
    const Loader memory(preloaded, options);
    // Raw pixels, normalised afterwards (as a GPU does): the same bits again.
    const Loader raw(f.train, LoaderOptions(options).threads(3).raw_pixels(true));
    const Loader raw_memory(preloaded, LoaderOptions(options).raw_pixels(true));
    for (int64_t b = 0; b < one.batches_per_epoch(); ++b) {
      const Batch a = one.batch(1, b);
      EXPECT_TRUE(torch::equal(a.x, three.batch(1, b).x));
      EXPECT_TRUE(torch::equal(a.x, memory.batch(1, b).x)) << "batch " << b << ", augment " << options.augment();
      EXPECT_TRUE(torch::equal(a.y, memory.batch(1, b).y));
      for (const Loader* pixels : {&raw, &raw_memory}) {
        const Batch p = pixels->batch(1, b);
        ASSERT_EQ(p.x.scalar_type(), torch::kUInt8);
        EXPECT_TRUE(torch::equal(a.x, pixels->normalizer()(p.x))) << "raw batch " << b << ", augment " << options.augment();
        EXPECT_TRUE(torch::equal(a.y, p.y));
      }
    }
  }
  const auto options = LoaderOptions().batch_size(7).seed(3).normalization(norm);
  // Random crops too, and they differ between epochs.
  const Loader crop1(f.train, LoaderOptions(options).image_size(6).resized_crop(true).threads(1));
  const Loader crop3(f.train, LoaderOptions(options).image_size(6).resized_crop(true).threads(3));
  EXPECT_EQ(crop1.output_shape(), (std::vector<int64_t>{3, 6, 6}));
  EXPECT_TRUE(torch::equal(crop1.batch(0, 1).x, crop3.batch(0, 1).x));
  EXPECT_FALSE(torch::equal(crop1.batch(0, 1).x, crop1.batch(1, 1).x));
}

TEST(FolderLoader, ImagesOfDifferentSizesNeedAnImageSize) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {2, 2}, 1, 8, 8);
  test::write_image(dir.file("train/c0/big.png"), test::pattern_image(1, 20, 30, 1));
  test::write_tree(dir.path(), "val", {1, 1});
  const Folder f = scan_folder(dir.path(), FolderOptions());
  EXPECT_FALSE(f.train->common_size());
  EXPECT_TRUE(throws_with<UsageError>([&] { Loader(f.train, LoaderOptions()); }, {"differ in size"}));
  const Loader loader(f.train, LoaderOptions().image_size(8).shuffle(false));
  // The 20x30 image becomes its centred 20x20 square resized to 8x8.
  EXPECT_EQ(loader.batch(0, 0).x.sizes(), torch::IntArrayRef({5, 1, 8, 8}));
}

TEST(FolderRegistry, FolderSpecsLoadAsSourcesOnly) {
  TempDir dir;
  test::write_tree(dir.path(), "train", {1, 1});
  test::write_tree(dir.path(), "test", {1, 1});
  const SourceSplit s = load_sources("folder:" + dir.path());
  ASSERT_TRUE(s.scanned);
  EXPECT_EQ(s.train->size(), 2);
  EXPECT_EQ(s.test->name(), fs::path(dir.path()).filename().string() + "/test");
  EXPECT_TRUE(throws_with<UsageError>([&] { load_dataset("folder:" + dir.path()); }, {"use load_sources"}));
  EXPECT_TRUE(throws_with<UsageError>([&] { load_sources("folder"); }, {"needs a directory"}));
}

}  // namespace
}  // namespace stalepipe::data
