// Training on image folders through the CLI: executors agree bit for bit, kill -9 + resume is
// exact, Fashion-MNIST as PNG files is the IDX data, and every bad input is one line.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "stalepipe/data/folder.h"
#include "stalepipe/data/registry.h"
#include "support/cli.h"
#include "support/image_tree.h"
#include "support/ranks.h"
#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {

namespace fs = std::filesystem;

// dir/train and dir/val of 10 classes: JPEG and PNG, three sizes, gray and colour.
void write_mixed_tree(const std::string& dir, int train_per_class, int val_per_class) {
  const int64_t sizes[3][2] = {{24, 24}, {30, 36}, {36, 30}};
  for (const auto& [split, n] : {std::make_pair(std::string("train"), train_per_class), std::make_pair(std::string("val"), val_per_class)}) {
    for (int c = 0; c < 10; ++c) {
      for (int i = 0; i < n; ++i) {
        const int64_t seed = c * 100003 + i;
        const auto* size = sizes[seed % 3];
        const bool jpeg = seed % 2 == 0;
        write_image(c10::str(dir, "/", split, "/class", c, "/", i, jpeg ? ".jpg" : ".png"),
                    pattern_image(seed % 5 == 0 ? 1 : 3, size[0], size[1], seed), jpeg);
      }
    }
  }
}

std::vector<std::string> folder_run(const std::string& tree) {
  return {"train", "--data", "folder:" + tree, "--image-size", "28", "--resized-crop", "--model", "lenet5",
          "--pipeline", "2", "--threads", "2", "--threads-per-worker", "1", "--batch-size", "64", "--epochs", "1",
          "--max-steps", "48", "--checkpoint-every", "12", "--lr", "0.02", "--progress", "none"};
}

class MixedTree : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tree_ = new TempDir;
    write_mixed_tree(tree_->path(), 2000, 30);  // 20,000 training images
  }
  static void TearDownTestSuite() { delete tree_; }
  static TempDir* tree_;
};
TempDir* MixedTree::tree_ = nullptr;

TEST_F(MixedTree, EveryExecutorTrainsTheSameBitsAndAKilledRunResumesExactly) {
  TempDir emulated, threads, processes, killed;
  const auto run = folder_run(tree_->path());
  const auto e = run_cli(with(run, {"--executor", "emulated", "--out", emulated.path()}));
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_NE(e.err.find("20000 train / 300 test, 3x32x32"), std::string::npos) << e.err;
  const auto t = run_cli(with(run, {"--executor", "threads", "--data-threads", "2", "--out", threads.path()}));
  ASSERT_EQ(t.status, 0) << t.err;
  expect_same_results(emulated.path(), threads.path());
  ASSERT_EQ(run_launch(2, with(run, {"--executor", "processes", "--data-threads", "1", "--out", processes.path()}),
                       processes.file("launch.log"), 240),
            0)
      << slurp(processes.file("launch.log"));
  expect_same_results(emulated.path(), processes.path());

  const pid_t pid = start_cli(with(run, {"--out", killed.path()}), killed.file("o"), killed.file("e"));
  wait_for_checkpoint(killed.path());
  ::kill(pid, SIGKILL);
  wait_cli(pid);
  const auto resumed = run_cli({"train", "--resume", killed.path(), "--progress", "none"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  expect_same_results(threads.path(), killed.path());
}

TEST_F(MixedTree, AResumedRunRefusesATreeThatChanged) {
  TempDir run;
  const auto first = run_cli(with(folder_run(tree_->path()), {"--stop-at-step", "12", "--out", run.path()}));
  ASSERT_EQ(first.status, 130) << first.err;  // stopped as if interrupted, resumable
  // config.json holds the folder's absolute path, so the run resumes from any directory.
  const auto config = nlohmann::json::parse(slurp(run.file("config.json")));
  EXPECT_EQ(config["data_folder_path"], fs::absolute(tree_->path()).lexically_normal().string());
  write_image(tree_->path() + "/train/class3/new.png", pattern_image(3, 24, 24, 1));
  expect_one_line_error(run_cli({"train", "--resume", run.path(), "--progress", "none"}), 2,
                        "has changed since the run started");
  fs::remove(tree_->path() + "/train/class3/new.png");
  const auto resumed = run_cli({"train", "--resume", run.path(), "--progress", "none"}, "/");
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

// Every image Debian's Fashion-MNIST holds, written as PNG files by `data export`, reads back
// as the IDX pixels.
TEST(ImageFolder, FashionMnistAsPngFilesDecodesToTheIdxPixels) {
  TempDir dir;
  const auto exported = run_cli({"data", "export", "--data", "fashion-mnist", dir.path(), "--threads", "2"});
  ASSERT_EQ(exported.status, 0) << exported.err;
  const data::DataSplit idx = data::load_dataset("fashion-mnist");
  const data::Folder folder = data::scan_folder(dir.path(), data::FolderOptions().threads(2));
  for (const auto& [source, reference] : {std::make_pair(folder.train, &idx.train), std::make_pair(folder.test, &idx.test)}) {
    ASSERT_EQ(source->size(), reference->size());
    const data::Dataset decoded = data::preload(*source, 2);
    int64_t different = 0;
    for (int64_t j = 0; j < source->size(); ++j) {
      // DIR/<split>/<class>/<index>.png
      const int64_t i = std::stoll(fs::path(source->files()[j].path).stem().string());
      different += !torch::equal(decoded.images[j], reference->images[i]) ||
                   decoded.labels[j].item<int64_t>() != reference->labels[i].item<int64_t>();
    }
    EXPECT_EQ(different, 0) << source->name();
  }
}

class BadTree : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tree(dir_.path(), "train", {3, 3}, 1, 16, 16);
    write_tree(dir_.path(), "val", {1, 1}, 1, 16, 16);
  }
  CliResult train(const std::vector<std::string>& more = {}) {
    return run_cli(with({"train", "--data", "folder:" + dir_.path(), "--max-steps", "1", "--batch-size", "2",
                         "--progress", "none"}, more));
  }
  std::string file(const std::string& name) { return dir_.file(name); }
  TempDir dir_;
};

TEST_F(BadTree, EachBadFileIsOneLineNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty file"},
      {"GIF89a fake", "not a JPEG or PNG image"},
      {"<html>this is a web page</html>", "not a JPEG or PNG image"},
  };
  for (const auto& [content, fault] : cases) {
    write_text(file("train/c1/bad.jpg"), content);
    expect_one_line_error(train(), 1, file("train/c1/bad.jpg") + ": " + fault);
  }
  auto png = data::encode_png(pattern_image(1, 16, 16, 3));
  png.resize(png.size() - 20);
  fs::remove(file("train/c1/bad.jpg"));
  write_bytes(file("train/c1/cut.png"), png);
  expect_one_line_error(train(), 1, file("train/c1/cut.png") + ": truncated");
  fs::remove(file("train/c1/cut.png"));
  write_image(file("train/c0/huge.png"), pattern_image(1, 200, 200, 1));
  expect_one_line_error(train({"--max-megapixels", "0.01"}), 1, "huge.png: ");
  // A file too large for any image within the bound is refused before it is read.
  std::filesystem::resize_file(file("train/c0/huge.png"), 2 << 20);
  expect_one_line_error(train({"--max-megapixels", "0.01"}), 1, "huge.png: 2097152 bytes is more than an image of at most 0.01 megapixels takes");
  fs::remove(file("train/c0/huge.png"));
  fs::create_directory_symlink("..", file("train/c0/loop"));
  expect_one_line_error(train(), 1, "symbolic link loop");
  fs::remove(file("train/c0/loop"));
  ASSERT_EQ(::mkfifo(file("train/c0/pipe.png").c_str(), 0644), 0);
  expect_one_line_error(train(), 1, "pipe.png: not a regular file (a FIFO, socket or device)");
  fs::remove(file("train/c0/pipe.png"));
  fs::create_symlink(file("nowhere.png"), file("train/c0/gone.png"));
  expect_one_line_error(train(), 1, "gone.png: broken symbolic link");
  fs::remove(file("train/c0/gone.png"));
  write_image(file("train/c0/\xff.png"), pattern_image(1, 16, 16, 1));
  expect_one_line_error(train(), 1, "\\xff.png: the name is not UTF-8");
  fs::remove(file("train/c0/\xff.png"));
  if (::geteuid() != 0) {  // root reads every file
    ::chmod(file("train/c0/0.png").c_str(), 0);
    expect_one_line_error(train(), 1, "0.png: cannot be read: Permission denied");
    ::chmod(file("train/c0/0.png").c_str(), 0644);
  }
  ASSERT_EQ(train().status, 0) << "the tree is good again";
}

TEST_F(BadTree, LayoutFaultsAreOneLine) {
  fs::create_directories(file("train/empty"));
  expect_one_line_error(train(), 1, "train/empty: empty class folder");
  fs::remove(file("train/empty"));
  write_tree(dir_.path(), "val", {0, 0, 1});
  expect_one_line_error(train(), 1, "class 'c2' is not in");
  fs::remove_all(file("val/c2"));
  expect_one_line_error(train({"--val-fraction", "0.2"}), 2, "has val/ beside train/");
  fs::rename(file("val"), file("elsewhere"));
  expect_one_line_error(train(), 2, "train has no val/ or test/ beside it");
  expect_one_line_error(run_cli({"train", "--data", "folder:" + file("train"), "--progress", "none"}), 2,
                        "no train/ folder; give a validation fraction (--val-fraction)");
  expect_one_line_error(train({"--val-fraction", "1.5"}), 2, "--val-fraction must be in [0, 1)");
  expect_one_line_error(run_cli({"train", "--data", "folder:" + file("nowhere"), "--progress", "none"}), 1,
                        "image folder does not exist");
  fs::create_directories(file("bare/train"));
  fs::create_directories(file("bare/val"));
  expect_one_line_error(run_cli({"train", "--data", "folder:" + file("bare"), "--progress", "none"}), 1,
                        "no class folders");
}

TEST_F(BadTree, SkipBadImagesTrainsOnTheRestAndListsThem) {
  write_text(file("train/c0/bad.png"), "not an image");
  TempDir run;
  const auto r = train({"--skip-bad-images", "--out", run.path()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("6 train / 2 test, 1x32x32, 1 unreadable images left out"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(run.file("skipped-images.txt")).find(file("train/c0/bad.png") + ": not a JPEG or PNG image"), 0u);
  const auto inspect = run_cli({"data", "inspect", dir_.path()});
  EXPECT_EQ(inspect.status, 1);
  EXPECT_NE(inspect.out.find("unreadable: 1 files"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("train: 7 image files, 6 readable, 16x16 to 16x16 pixels (height x width); PNG gray 6"), std::string::npos)
      << inspect.out;
}

TEST_F(BadTree, BenchPrintsTheInputPipelinesRateBesideTheTrainingRate) {
  const auto r = run_cli({"bench", "--model", "lenet5", "--pipeline", "2", "--steps", "10", "--batch-size", "4",
                          "--threads", "2", "--data", "folder:" + dir_.path(), "--image-size", "20"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("input pipeline \\(--data folder:.*, 1x32x32, [0-9]+ decode "
                                                  "thread\\(s\\)\\): [0-9]+ img/s alone, [0-9.]+x the pipeline's [0-9]+ img/s")))
      << r.out;
}

TEST_F(BadTree, TheDecodedCacheIsReadWhenItMatchesAndADamagedOneIsNamed) {
  TempDir cache, plain, cached;
  const auto a = train({"--out", plain.path()});
  ASSERT_EQ(a.status, 0) << a.err;
  const auto b = train({"--cache-images", cache.path(), "--out", cached.path()});
  ASSERT_EQ(b.status, 0) << b.err;
  expect_same_results(plain.path(), cached.path());  // the same pixels, read instead of decoded
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(cache.path())) files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 2u);  // train and val
  // A flipped byte in the pixels, then a cut file: each named, with what to do.
  std::string bytes = slurp(files[0]);
  bytes[bytes.size() - 20] ^= 0x5a;
  write_text(files[0], bytes);
  expect_one_line_error(train({"--cache-images", cache.path()}), 1, files[0] + ": image cache fails its checksum; delete it");
  write_text(files[0], bytes.substr(0, bytes.size() - 8));
  expect_one_line_error(train({"--cache-images", cache.path()}), 1, files[0] + ": image cache is ");
  fs::remove(files[0]);
  ASSERT_EQ(train({"--cache-images", cache.path()}).status, 0);  // made again
  // Another tree gives other files (their sizes, times and labels are in the name).
  write_image(file("train/c1/more.png"), pattern_image(1, 16, 16, 9));
  ASSERT_EQ(train({"--cache-images", cache.path()}).status, 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(cache.path()), fs::directory_iterator()), 3);
}

TEST_F(BadTree, OneTreeSplitsByTheValidationFractionAndTheDataToolsNameTheirFaults) {
  const auto r = run_cli({"train", "--data", "folder:" + file("train"), "--val-fraction", "0.34", "--max-steps", "1",
                          "--batch-size", "2", "--progress", "none"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("(4 train / 2 test, 1x32x32)"), std::string::npos) << r.err;  // round(0.34 * 3) per class
  expect_one_line_error(run_cli({"data", "export", "--data", "synthetic-regression:8", file("out")}), 2,
                        "has regression targets, no classes to make folders of");
  expect_one_line_error(run_cli({"data", "inspect", file("nowhere")}), 1, "image folder does not exist");
  const auto speed = run_cli({"data", "speed", "--data", "folder:" + dir_.path(), "--batch-size", "2", "--batches", "3"});
  ASSERT_EQ(speed.status, 0) << speed.err;
  EXPECT_TRUE(std::regex_search(speed.out, std::regex("^loader: [0-9]+ img/s \\(6 images of 1x32x32 in [0-9.]+ s, 1 decode thread\\(s\\)\\)")))
      << speed.out;
}

#ifdef STALEPIPE_OWN_READER_EXAMPLE
// examples/own_reader: a list file of images as the user's own DecodingSource, trained.
TEST_F(BadTree, TheOwnReaderExampleTrainsOnAListFile) {
  write_image(file("train/c0/wide.png"), pattern_image(1, 20, 40, 7));  // sizes differ: resized
  for (const std::string split : {"train", "val"}) {
    std::ofstream list(file(split + ".txt"));
    for (const auto& entry : fs::recursive_directory_iterator(file(split))) {
      if (entry.is_regular_file()) list << entry.path().string() << " " << entry.path().parent_path().filename().string().substr(1) << "\n";
    }
  }
  const std::string log = file("example.log");
  ASSERT_EQ(wait_for(spawn({file("train.txt"), file("val.txt"), "32", "1"}, {}, log, STALEPIPE_OWN_READER_EXAMPLE), 120), 0)
      << slurp(log);
  EXPECT_NE(slurp(log).find("7 training and 2 test images, 2 classes, 32x32"), std::string::npos) << slurp(log);
  EXPECT_NE(slurp(log).find("test accuracy "), std::string::npos) << slurp(log);
}
#endif

}  // namespace
}  // namespace stalepipe::test
