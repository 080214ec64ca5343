// The model zoo: the networks of the paper, built by name.
//
// All networks but resnet18 are CIFAR-style (32x32 input; the data loader zero-pads 28x28 data
// to 32x32); resnet18 is ImageNet's and takes any size from 32x32 up. All take their input
// channels and class count from InputShape. Unit granularity fixes the PPV
// numbering (model.h): one unit per weight layer, holding what follows it up to the next weight
// layer (ReLU, BN, max pool, a residual add), except that a flatten or global average pool
// belongs to the unit of the linear layer that consumes it. A ResNet block is two units that
// hand the block's input from the first to the second as a skip tensor (models/skips.h), so a
// register may sit inside a block.
//
//  lenet5   conv 6@5x5 - relu - maxpool2 | conv 16@5x5 - relu - maxpool2 |
//           flatten - fc 120 - relu | fc 84 - relu | fc classes.           5 weight layers.
//           61,706 parameters for 1x32x32 input and 10 classes.
//  alexnet  The usual CIFAR adaptation (5 conv + 3 fc, ReLU, 3 max pools; dropout: ZooOptions):
//           conv1 64@5x5 stride 2 pad 2 - relu - maxpool2      32x32 -> 16x16 -> 8x8
//           conv2 192@3x3 pad 1 - relu - maxpool2               8x8 -> 4x4
//           conv3 384@3x3 pad 1 - relu
//           conv4 256@3x3 pad 1 - relu
//           conv5 256@3x3 pad 1 - relu - maxpool2               4x4 -> 2x2
//           flatten (1024) - fc 4096 - relu | fc 4096 - relu | fc classes.
//           8 weight layers; 23,275,338 parameters for 3x32x32 (88.8 MiB of fp32 weights, the
//           paper's table 9 gives 88.87 MB).
//  vgg16    13 conv 3x3 pad 1 without bias, each + BatchNorm2d + ReLU; channels
//           64 64 M 128 128 M 256 256 256 M 512 512 512 M 512 512 512 M (M = maxpool2, ending
//           at 512x1x1) | flatten - fc 512 - relu | fc 512 - relu | fc classes (dropout: ZooOptions).
//           16 weight layers; 15,249,354 parameters for 3x32x32 (58.17 MiB; table 9: 58.16).
//  resnet<D> D = 6n+2, n >= 1 (20, 56, 110, 224, 362, ...): He et al. 2016 CIFAR ResNet:
//           stem conv 16@3x3 + BN + ReLU | 3 stages of n BasicBlocks (16, 32, 64 channels,
//           stride 2 at the first block of stages 2 and 3, option-A parameter-free shortcut)
//           | global average pool - fc classes. Units "conv1", "block<stage>_<i>a" (conv1 of
//           the block, stashing the block's input as "block<stage>_<i>"), "block<stage>_<i>b"
//           (conv2, shortcut, add), "fc". D weight layers: stem = 1, block k (k = 1..3n) = 2k
//           and 2k+1, fc = D. Registers may follow any layer but the last: 1, 3, 5, ..., D-1
//           between blocks (the paper's positions; 2n+1 ends stage 1), 2, 4, ... inside them.
//           Parameters for 3 channels: resnet20 269,722; resnet56 853,018; resnet110 1,727,962.
//  resnet18 He et al. 2016's ImageNet ResNet-18 as torchvision builds it: stem conv 64@7x7
//           stride 2 pad 3 + BN + ReLU + maxpool 3x3 stride 2 pad 1 | 4 stages of 2
//           BasicBlocks (64, 128, 256, 512 channels; stride 2 and a 1x1 conv + BN projection
//           shortcut at the first block of stages 2-4) | global average pool - fc classes.
//           Any input from 32x32 up (the network reduces by 32; 32x32 pools 1x1). Units and
//           numbering as resnet<D> with D = 18 (the projections are not counted, as in the
//           depth): registers may follow layers 1..17. 11,689,512 parameters for 3 channels
//           and 1000 classes (torchvision's resnet18).
//
// Initialisation draws only from LibTorch's default generator, so torch::manual_seed(s) before
// make_model gives the same parameters every time. LeNet-5 and AlexNet keep LibTorch's default
// initialisation; VGG-16 and the ResNets use kaiming_normal_(fan_out, relu) for the convs (as
// torchvision and the common CIFAR implementations) and weight 1 / bias 0 for batch norm;
// their linear layers keep LibTorch's default.
#pragma once

#include <string>
#include <vector>

#include <torch/arg.h>

#include "stalepipe/models/model.h"

namespace stalepipe::models {

// Variations of the zoo's networks.
struct ZooOptions {
  // alexnet and vgg16: dropout with this probability before each hidden fully connected layer
  // (the inputs of fc1 and fc2, the classic placement); 0 (the default): none, as above.
  TORCH_ARG(double, dropout) = 0;
};

// Builds a fresh model by name (case-sensitive): "lenet5", "alexnet", "vgg16", "resnet18",
// "resnet<D>", "unet". Throws UsageError for an unknown name (listing the valid ones), a ResNet depth
// neither 18 nor of the form 6n+2, an input shape the network cannot take (non-positive sizes, or too small for
// its pooling), or a dropout outside [0, 1) or asked of a network without a placement for it.
Model make_model(const std::string& name, const InputShape& input, const ZooOptions& options = {});

// Whether `name` has a dropout placement (ZooOptions::dropout).
bool has_dropout_placement(const std::string& name);

// Whether `name`'s zoo network trains faster in channels-last (NHWC) than in NCHW on CPU, as
// measured (docs/performance.md, "Channels-last"); false for a name that is no zoo network.
// The layout a zoo network trains in unless the caller asks for one (the api's Layout::kAuto).
bool prefers_channels_last(const std::string& name);

// The valid names for help text: {"lenet5", "alexnet", "vgg16", "resnet18", "resnet<6n+2>", "unet"}.
std::vector<std::string> model_names();

}  // namespace stalepipe::models
