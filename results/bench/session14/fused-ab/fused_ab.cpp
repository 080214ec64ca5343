// Interleaved A/B in one process (session 14): the zoo model as built (fused batch norm + ReLU,
// layout-keeping shortcut) against the same model run with LibTorch's separate operations.
// Steps alternate between the two, so a slow minute of the machine slows both.
#include <torch/torch.h>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include "stalepipe/models/zoo.h"
#include "stalepipe/models/blocks.h"
#include "stalepipe/models/memory_format.h"
#include "stalepipe/common/malloc_tuning.h"
using namespace stalepipe::models;
torch::Tensor shortcut(BasicBlockImpl* b, const torch::Tensor& input) {
  if (b->stride == 1 && b->planes == b->in_planes) return input;
  using torch::indexing::None; using torch::indexing::Slice;
  auto sub = input.index({Slice(), Slice(), Slice(None, None, b->stride), Slice(None, None, b->stride)});
  const int64_t front = (b->planes - b->in_planes) / 2;
  return torch::constant_pad_nd(sub, {0, 0, 0, 0, front, b->planes - b->in_planes - front}, 0);
}
torch::Tensor stock_forward(Model& model, torch::Tensor x) {
  for (auto& unit : model.units) {
    auto* m = unit.module.ptr().get();
    if (auto* b = dynamic_cast<BasicBlockImpl*>(m)) {
      auto y = b->bn1->forward(b->conv1->forward(x)).relu_();
      y = b->bn2->forward(b->conv2->forward(y));
      x = (y + shortcut(b, x)).relu_();
    } else if (auto* c = dynamic_cast<ConvBlockImpl*>(m); c && c->bn) {
      x = c->bn->forward(c->conv->forward(x)).relu_();
      if (c->pool) x = c->pool->forward(x);
    } else {
      x = unit.module.forward<torch::Tensor>(x);
    }
  }
  return x;
}
int main(int argc, char** argv) {
  stalepipe::keep_freed_memory();
  at::set_num_threads(argc > 3 ? atoi(argv[3]) : 1);
  InputShape in; in.channels = 1;
  torch::manual_seed(1); auto A = make_model(argv[1], in);
  torch::manual_seed(1); auto B = make_model(argv[1], in);
  auto sa = A.as_sequential(), sb = B.as_sequential();
  to_memory_format(*sa, torch::MemoryFormat::ChannelsLast); to_memory_format(*sb, torch::MemoryFormat::ChannelsLast);
  auto opt = [](auto& s) { return torch::optim::SGD(s->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(5e-4)); };
  auto oa = opt(sa), ob = opt(sb);
  auto x = torch::randn({128, 1, 32, 32}).contiguous(torch::MemoryFormat::ChannelsLast);
  auto y = torch::randint(0, 10, {128});
  auto step = [&](bool fused) {
    auto& o = fused ? oa : ob;
    o.zero_grad();
    auto out = fused ? sa->forward(x) : stock_forward(B, x);
    auto loss = torch::nn::functional::cross_entropy(out, y);
    loss.backward(); o.step();
    return loss.item<double>();
  };
  // correctness: losses and weights after a few steps
  for (int i = 0; i < 3; ++i) { double la = step(true), lb = step(false); std::printf("loss fused %.7f stock %.7f\n", la, lb); }
  double worst = 0; auto pa = sa->named_parameters(), pb = sb->named_parameters();
  for (auto& p : pa) worst = std::max(worst, (p.value() - pb[p.key()]).abs().max().item<double>());
  auto ba = sa->named_buffers(), bb = sb->named_buffers(); double wb = 0;
  for (auto& p : ba) wb = std::max(wb, (p.value().to(torch::kDouble) - bb[p.key()].to(torch::kDouble)).abs().max().item<double>());
  std::printf("max |weight diff| %.3g, max |buffer diff| %.3g\n", worst, wb);
  int n = argc > 2 ? atoi(argv[2]) : 10; std::vector<double> ta, tb;
  for (int i = 0; i < n; ++i) for (bool f : {i % 2 == 0, i % 2 != 0}) {
    auto t0 = std::chrono::steady_clock::now(); step(f);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    (f ? ta : tb).push_back(ms);
  }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  double sa_ = 0, sb_ = 0; for (double v : ta) sa_ += v; for (double v : tb) sb_ += v;
  std::printf("ms/step median fused %.1f stock %.1f  (stock/fused %.3f; sums %.3f)\n", med(ta), med(tb), med(tb) / med(ta), sb_ / sa_);
}
