// Your own reader: a list file of "IMAGE-PATH LABEL" lines (the layout many image tools
// write) as a data::DecodingSource, each image decoded when a batch needs it, resized with
// RandomResizedCrop on the loader's threads, and trained as a 2-partition pipeline.
//
//   build/examples/own_reader TRAIN_LIST TEST_LIST [IMAGE_SIZE=32] [EPOCHS=1]
//
// A list from a data set written as PNG files, for instance:
//   stalepipe data export --data fashion-mnist fm
//   find fm/train -name '*.png' | sort | awk -F/ '{print $0, $(NF-1) + 0}' > train.txt
//   find fm/test -name '*.png' | sort | awk -F/ '{print $0, $(NF-1) + 0}' > test.txt
// Prints the samples, a line per epoch and the test accuracy.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "stalepipe/stalepipe.h"

namespace data = stalepipe::data;

class ListFileSource : public data::DecodingSource {
 public:
  explicit ListFileSource(const std::string& list) : name_(list) {
    std::ifstream in(list);
    if (!in) throw stalepipe::RuntimeError(list + ": cannot be read");
    std::vector<int64_t> labels;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string path;
      int64_t label = -1;
      if (!(fields >> path >> label) || label < 0) throw stalepipe::RuntimeError(list + ": not 'PATH LABEL': " + line);
      paths_.push_back(path);
      labels.push_back(label);
      classes_ = std::max(classes_, label + 1);
    }
    if (paths_.empty()) throw stalepipe::RuntimeError(list + ": no images listed");
    labels_ = torch::tensor(labels, torch::kInt64);
  }
  const std::string& name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t channels() const override { return 1; }
  int64_t num_classes() const override { return classes_; }
  const torch::Tensor& targets() const override { return labels_; }
  std::optional<std::pair<int64_t, int64_t>> common_size() const override { return std::nullopt; }
  // Called from the loader's threads at once: it touches nothing shared but what it reads.
  torch::Tensor decode(int64_t i) const override {
    std::ifstream in(paths_[i], std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return data::decode_image(bytes.data(), bytes.size(), paths_[i], channels());
  }

 private:
  std::string name_;
  std::vector<std::string> paths_;
  torch::Tensor labels_;
  int64_t classes_ = 0;
};

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: own_reader TRAIN_LIST TEST_LIST [IMAGE_SIZE=32] [EPOCHS=1]\n");
    return 2;
  }
  const int64_t size = argc > 3 ? std::stoll(argv[3]) : 32;
  const int64_t epochs = argc > 4 ? std::stoll(argv[4]) : 1;
  auto train = std::make_shared<ListFileSource>(argv[1]);
  auto test = std::make_shared<ListFileSource>(argv[2]);
  auto options = data::LoaderOptions().batch_size(64).image_size(size).seed(1).threads(2);
  // The mean and standard deviation of the centred crops, one pass over the training list.
  options.normalization(data::compute_normalization(train, options));
  const data::Loader train_loader(train, data::LoaderOptions(options).resized_crop(true));
  const data::Loader test_loader(test, data::LoaderOptions(options).batch_size(500).shuffle(false));
  std::printf("%lld training and %lld test images, %lld classes, %lldx%lld\n", static_cast<long long>(train->size()),
              static_cast<long long>(test->size()), static_cast<long long>(train->num_classes()),
              static_cast<long long>(size), static_cast<long long>(size));

  torch::manual_seed(1);
  auto model = stalepipe::models::make_model("resnet20", {1, size, size, train->num_classes()});
  stalepipe::Options o;
  o.pipeline().ppv({7});  // a register after the first stage: 2 partitions
  o.optimizer().lr(0.05);
  o.run().epochs(epochs);
  stalepipe::PipelineTrainer trainer(model, o, train_loader.batches_per_epoch());
  stalepipe::LoaderSource train_batches(train_loader), test_batches(test_loader);
  stalepipe::FitHooks hooks;
  hooks.on_epoch = [&](const stalepipe::EpochSummary& s) {
    std::printf("epoch %lld: train loss %.4f, %.0f img/s (loader alone %.0f img/s)\n", static_cast<long long>(s.epoch),
                s.train_loss, s.images_per_second, train_batches.loader_images_per_second());
  };
  trainer.fit(train_batches, hooks);
  std::printf("test accuracy %.4f\n", trainer.evaluate(test_batches).accuracy.value_or(0));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "own_reader: %s\n", e.what());
  return 1;
}
