// 2x2 max pooling + ReLU (models/max_pool.h) against LibTorch's max_pool2d + relu_, one
// intra-op thread, on the pooled shapes of LeNet-5 and VGG-16 at batch 128.
//
// Run:    build/bench/bench_pool [--benchmark_filter=Lenet]
// Prints: per shape, layout and direction (forward alone; forward and backward), the time of
//         one call of ours ("Ours") and of LibTorch's ("LibTorch"). The machine's malloc keeps
//         freed memory as training does (stalepipe::keep_freed_memory), so that page faults of
//         fresh allocations are not timed.
// Checks, before timing: both give the same values and input gradients bit for bit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "stalepipe/common/malloc_tuning.h"
#include "stalepipe/models/max_pool.h"

namespace {

struct Shape {
  const char* name;
  int64_t channels, size;
  torch::MemoryFormat format;
};

constexpr auto kNchw = torch::MemoryFormat::Contiguous;
constexpr auto kChannelsLast = torch::MemoryFormat::ChannelsLast;
const Shape kShapes[] = {
    {"Lenet5Conv1/ChannelsLast", 6, 28, kChannelsLast}, {"Lenet5Conv2/ChannelsLast", 16, 10, kChannelsLast},
    {"Lenet5Conv1/Nchw", 6, 28, kNchw},                 {"Vgg16Conv2/Nchw", 64, 32, kNchw},
    {"Vgg16Conv2/ChannelsLast", 64, 32, kChannelsLast},
};

torch::Tensor input_of(const Shape& s) {
  torch::manual_seed(1);
  return torch::randn({128, s.channels, s.size, s.size}).contiguous(s.format).requires_grad_();
}

torch::Tensor ours(const torch::Tensor& x) { return stalepipe::models::max_pool_2x2(x, true); }
torch::Tensor libtorch(const torch::Tensor& x) { return torch::max_pool2d(x, 2).relu_(); }

std::pair<torch::Tensor, torch::Tensor> output_and_gradient(const torch::Tensor& input,
                                                            torch::Tensor (*pool)(const torch::Tensor&)) {
  const torch::Tensor x = input.detach().clone().requires_grad_();
  const torch::Tensor y = pool(x);
  y.backward(torch::ones_like(y));
  return {y.detach(), x.grad()};
}

void check_correctness() {
  for (const Shape& s : kShapes) {
    const torch::Tensor x = input_of(s);
    if (!stalepipe::models::pools_by_hand(x)) {
      std::fprintf(stderr, "bench_pool: %s does not take the hand-written loop\n", s.name);
      std::exit(1);
    }
    const auto [y, dx] = output_and_gradient(x, ours);
    const auto [y_ref, dx_ref] = output_and_gradient(x, libtorch);
    if (!torch::equal(y, y_ref) || !torch::equal(dx, dx_ref)) {
      std::fprintf(stderr, "bench_pool: %s differs from LibTorch's pooling\n", s.name);
      std::exit(1);
    }
  }
}

void forward(benchmark::State& state, const Shape& s, torch::Tensor (*pool)(const torch::Tensor&)) {
  const torch::Tensor x = input_of(s);
  torch::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(pool(x));
}

void forward_backward(benchmark::State& state, const Shape& s, torch::Tensor (*pool)(const torch::Tensor&)) {
  torch::Tensor x = input_of(s);
  const torch::Tensor dy = torch::ones_like(pool(x)).contiguous(s.format);
  for (auto _ : state) {
    pool(x).backward(dy);
    x.mutable_grad().reset();
  }
}

}  // namespace

int main(int argc, char** argv) {
  stalepipe::keep_freed_memory();
  at::set_num_threads(1);
  check_correctness();
  for (const Shape& s : kShapes) {
    for (const auto& [pool_name, pool] : {std::pair{"Ours", &ours}, std::pair{"LibTorch", &libtorch}}) {
      const std::string name = std::string(s.name) + "/" + pool_name;
      benchmark::RegisterBenchmark((name + "/Forward").c_str(), forward, s, pool)->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((name + "/ForwardBackward").c_str(), forward_backward, s, pool)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
