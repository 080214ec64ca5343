// The antialiased bilinear resize (data/resample.h) of one 3-channel image, as the image loader
// calls it per sample: a 375x500 stored image (a typical ImageNet size) to the training
// input's 224x224 and to 64x64.
//
// Run:    build/bench/bench_resize
// Prints: per output size, the time of one call, from a contiguous image ("Contiguous") and
//         from a crop view of a larger one ("View", the loader's case after a region decode).
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "stalepipe/data/resample.h"

namespace {

void resize(benchmark::State& state, bool view) {
  const int64_t side = state.range(0);
  torch::manual_seed(1);
  const torch::Tensor big = torch::randint(0, 256, {3, 400, 520}, torch::kUInt8);
  const torch::Tensor image = view ? big.narrow(1, 10, 375).narrow(2, 10, 500)
                                   : big.narrow(1, 10, 375).narrow(2, 10, 500).contiguous();
  std::vector<uint8_t> out(3 * side * side);
  for (auto _ : state) {
    stalepipe::data::resize_bilinear(image, side, side, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}

}  // namespace

BENCHMARK_CAPTURE(resize, Contiguous, false)->Arg(224)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(resize, View, true)->Arg(224)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
