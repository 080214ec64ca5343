// The classic LibTorch MNIST network (two convolutions, channel dropout after the second,
// dropout before the last linear layer, log-softmax and NLL loss), cut into 3 partitions by
// registers after its two convolutions and trained with stale weights. Its dropout is exact:
// every executor, every repeat and every resume draw the same masks.
//
//   build/examples/mnist_dropout [--epochs 2] [--seed 1] [--executor threads] [--data fashion-mnist]
//                                [--train-subset N] [--test-subset N] [--plain]
//
// --executor processes runs one rank of 3: start three copies with RANK=0..2, WORLD_SIZE=3,
// MASTER_ADDR and MASTER_PORT set (as torchrun does). --plain trains the same network in a plain
// torch::optim::SGD loop instead (the reference for accuracy).
// Prints a line per epoch, then "test_accuracy A" and "partition k weights_digest D" (a hash of
// the partition's parameter bytes) for each partition this process trains. Measured:
// docs/results.md.
#include <cstdio>
#include <cstring>
#include <string>

#include <torch/torch.h>

#include "stalepipe/stalepipe.h"

namespace nn = torch::nn;

namespace {

struct Args {
  int64_t epochs = 2, train_subset = 0, test_subset = 0;
  uint64_t seed = 1;
  std::string executor = "threads", data = "fashion-mnist";
  bool plain = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw stalepipe::UsageError(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--epochs") a.epochs = std::stoll(value());
    else if (flag == "--seed") a.seed = std::stoull(value());
    else if (flag == "--executor") a.executor = value();
    else if (flag == "--data") a.data = value();
    else if (flag == "--train-subset") a.train_subset = std::stoll(value());
    else if (flag == "--test-subset") a.test_subset = std::stoll(value());
    else if (flag == "--plain") a.plain = true;
    else throw stalepipe::UsageError("unknown flag " + flag);
  }
  return a;
}

// The network, unit by unit. Stock LibTorch dropout modules: the builder swaps them for
// stalepipe's exact ones (models/dropout.h).
stalepipe::models::Model mnist_net(uint64_t seed) {
  torch::manual_seed(seed);
  return stalepipe::models::ModelBuilder("mnist-net", {1, 28, 28, 10})
      .add("conv1", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 10, 5)), nn::MaxPool2d(2), nn::ReLU()))
      .add("conv2", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(10, 20, 5)), nn::Dropout2d(0.5),
                                   nn::MaxPool2d(2), nn::ReLU()))
      .add("fc1", nn::Sequential(nn::Flatten(), nn::Linear(320, 50), nn::ReLU(), nn::Dropout(0.5)))
      .add("fc2", nn::Sequential(nn::Linear(50, 10), nn::LogSoftmax(1)))
      .build();
}

// A torch::data loader as the training loop's BatchSource: the loop needs the epoch length
// for the processes executor, which a torch loader does not tell.
template <typename TorchLoader>
class Batches : public stalepipe::BatchSource {
 public:
  Batches(TorchLoader& loader, int64_t samples, int64_t batch) : loader_(loader), count_((samples + batch - 1) / batch) {}
  int64_t batches_per_epoch() const override { return count_; }
  void start_epoch(int64_t, int64_t first) override {
    it_.emplace(loader_.begin());
    for (int64_t i = 0; i < first; ++i) ++*it_;
  }
  stalepipe::exec::Input next() override {
    if (*it_ == loader_.end()) return {};
    stalepipe::exec::Input in{(*it_)->data, (*it_)->target};
    ++*it_;
    return in;
  }

 private:
  TorchLoader& loader_;
  int64_t count_;
  std::optional<decltype(std::declval<TorchLoader&>().begin())> it_;
};

// FNV-1a over the parameters' bytes.
uint64_t digest(const std::vector<torch::Tensor>& params) {
  uint64_t h = 14695981039346656037ULL;
  for (const auto& p : params) {
    const auto c = p.contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

// The reference: the same units in a plain SGD loop on one thread.
template <typename Train, typename Test>
double train_plain(stalepipe::models::Model model, const Args& a, Train& train, Test& test, int64_t spe) {
  auto net = model.as_sequential();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  for (int64_t e = 0; e < a.epochs; ++e) {
    net->train();
    for (auto& b : *train) {
      sgd.zero_grad();
      torch::nll_loss(net->forward(b.data), b.target).backward();
      sgd.step();
    }
    std::printf("epoch %lld done (%lld mini-batches)\n", static_cast<long long>(e + 1), static_cast<long long>(spe));
  }
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0, n = 0;
  for (auto& b : *test) {
    correct += net->forward(b.data).argmax(1).eq(b.target).sum().template item<int64_t>();
    n += b.target.size(0);
  }
  std::printf("weights_digest %016llx\n", static_cast<unsigned long long>(digest(net->parameters())));
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  auto split = stalepipe::data::load_dataset(a.data);
  if (a.train_subset > 0) split.train = split.train.subset(a.train_subset);
  if (a.test_subset > 0) split.test = split.test.subset(a.test_subset);
  const auto norm = stalepipe::data::compute_normalization(split.train);
  const int64_t batch = 64;
  torch::manual_seed(a.seed);  // the RandomSampler's shuffles
  auto train = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      stalepipe::data::TorchDataset(split.train, norm).map(torch::data::transforms::Stack<>()), batch);
  auto test = torch::data::make_data_loader(
      stalepipe::data::TorchDataset(split.test, norm).map(torch::data::transforms::Stack<>()), 1000);
  const int64_t spe = (split.train.size() + batch - 1) / batch;
  if (a.plain) {
    std::printf("test_accuracy %.4f\n", train_plain(mnist_net(a.seed), a, train, test, spe));
    return 0;
  }

  stalepipe::Options options;
  options.pipeline().ppv({1, 2}).executor(stalepipe::exec::executor_from_name(a.executor)).threads_per_worker(1);
  options.optimizer().lr(0.01).momentum(0.5).weight_decay(0).lr_schedule(stalepipe::LrScheduleKind::kConstant);
  options.optimizer().loss("nll");  // the network ends in log-softmax
  options.run().epochs(a.epochs).seed(a.seed);
  stalepipe::PipelineTrainer trainer(mnist_net(a.seed), options, spe);
  Batches train_batches(*train, split.train.size(), batch);
  Batches test_batches(*test, split.test.size(), 1000);
  stalepipe::FitHooks hooks;
  hooks.on_epoch = [](const stalepipe::EpochSummary& s) {
    std::printf("epoch %lld: train loss %.4f, accuracy %.4f\n", static_cast<long long>(s.epoch), s.train_loss,
                s.train_accuracy.value_or(0));
  };
  trainer.fit(train_batches, hooks);
  const auto accuracy = trainer.evaluate(test_batches).accuracy;
  std::printf("test_accuracy %.4f\n", accuracy.value_or(0));
  for (int k = 0; k < trainer.pipeline().num_stages(); ++k) {
    if (!trainer.group().owns(k)) continue;  // processes: another rank trains it
    std::printf("partition %d weights_digest %016llx\n", k + 1,
                static_cast<unsigned long long>(digest(trainer.pipeline().stage(k).module()->parameters())));
  }
  return 0;
} catch (const stalepipe::UsageError& e) {
  std::fprintf(stderr, "mnist_dropout: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mnist_dropout: %s\n", e.what());
  return 1;
}
