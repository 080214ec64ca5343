// The zoo's small U-Net (Ronneberger et al. 2015, two levels): a network whose skips jump over
// several units, for segmentation-style tasks (per-pixel logits).
#include <string>
#include <vector>

#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include "builder_impl.h"
#include "stalepipe/models/batch_norm_relu.h"
#include "stalepipe/models/blocks.h"

namespace stalepipe::models::detail {
namespace {

torch::nn::Conv2d conv3x3(int64_t in, int64_t out) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
}

// conv 3x3 + BN + ReLU, then a 2x2 max pool: {x} -> {pooled, y}; y (before the pool) is the
// skip tensor the decoder at this level pops.
class EncoderImpl : public torch::nn::Cloneable<EncoderImpl>, public FlopCounted {
 public:
  EncoderImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    conv = register_module("conv", conv3x3(in_, out_));
    bn = register_module("bn", torch::nn::BatchNorm2d(out_));
  }
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> inputs) {
    torch::Tensor y = batch_norm_relu(*bn, conv(inputs[0]));
    torch::Tensor pooled = torch::nn::functional::max_pool2d(y, torch::nn::functional::MaxPool2dFuncOptions(2));
    return {std::move(pooled), std::move(y)};
  }
  double forward_flops(const std::vector<int64_t>& input_shape) const override {
    return conv2d_flops(*conv, input_shape);
  }

  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(Encoder);

// 2x2 transposed conv (in -> out, twice the size), concatenated with the popped skip (out
// channels), then conv 3x3 (2 out -> out) + BN + ReLU: {x, skip} -> {y}. Two weight layers.
class DecoderImpl : public torch::nn::Cloneable<DecoderImpl>, public FlopCounted {
 public:
  DecoderImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    up = register_module("up", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(in_, out_, 2).stride(2)));
    conv = register_module("conv", conv3x3(2 * out_, out_));
    bn = register_module("bn", torch::nn::BatchNorm2d(out_));
  }
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> inputs) {
    torch::Tensor joined = torch::cat({up(inputs[0]), inputs[1]}, 1);
    return {batch_norm_relu(*bn, conv(joined))};
  }
  double forward_flops(const std::vector<int64_t>& input_shape) const override {
    const int64_t h = 2 * input_shape[1], w = 2 * input_shape[2];
    const double transposed = 2.0 * static_cast<double>(in_ * out_ * 4 * input_shape[1] * input_shape[2]);
    return transposed + conv2d_flops(*conv, {2 * out_, h, w});
  }

  torch::nn::ConvTranspose2d up{nullptr};
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(Decoder);

}  // namespace

Model make_unet(const InputShape& input) {
  ModelBuilder model("unet", input);
  SP_CHECK_ARG(input.height % 4 == 0 && input.width % 4 == 0, "model unet: input ", input.height, "x",
               input.width, " does not halve twice; height and width must be multiples of 4");
  model.add("enc1", Encoder(input.channels, 16), UnitOptions().stashes({"enc1"}));
  model.add("enc2", Encoder(16, 32), UnitOptions().stashes({"enc2"}));
  model.add("bottom", ConvBlock(ConvBlockOptions(32, 64, 3).padding(1).batch_norm(true)));
  model.add("dec2", Decoder(64, 32), UnitOptions().pops({"enc2"}));
  model.add("dec1", Decoder(32, 16), UnitOptions().pops({"enc1"}));
  model.add("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, input.num_classes, 1)));
  Model built = model.build();
  init_convs_kaiming(built);
  return built;
}

}  // namespace stalepipe::models::detail
