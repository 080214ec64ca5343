// Private helpers shared by the zoo's network builders.
#pragma once

#include <string>

#include "stalepipe/common/error.h"
#include "stalepipe/models/model.h"
#include "stalepipe/models/model_builder.h"

namespace stalepipe::models::detail {

// Appends a unit holding the next `num_weight_layers` weight layers, through the public
// ModelBuilder that users call too.
template <typename ModuleHolder>
void append_unit(ModelBuilder& model, std::string name, ModuleHolder module, int num_weight_layers) {
  model.add(std::move(name), std::move(module), UnitOptions().weight_layers(num_weight_layers));
}

// Spatial size after a conv or pool; throws UsageError when the input is too small for it,
// so a wrong InputShape fails at build time instead of deep inside a forward pass.
inline int64_t shrink(const ModelBuilder& model, int64_t size, int64_t kernel, int64_t stride,
                      int64_t padding) {
  SP_CHECK_ARG(size + 2 * padding >= kernel, "model ", model.name(), ": input ",
               model.input().height, "x", model.input().width,
               " is too small (a feature map shrinks below the ", kernel, "x", kernel,
               " kernel); the zoo's networks expect 32x32");
  return (size + 2 * padding - kernel) / stride + 1;
}

// kaiming_normal_(fan_out, relu) for every Conv2d (bias, if any, zeroed); BatchNorm weight 1,
// bias 0. Draws from the default generator only.
void init_convs_kaiming(Model& model);

Model make_lenet5(const InputShape& input);
Model make_alexnet(const InputShape& input, double dropout);  // dropout: ZooOptions
Model make_vgg16(const InputShape& input, double dropout);
// Throws UsageError unless depth = 6n+2 with n >= 1.
Model make_resnet_cifar(int64_t depth, const InputShape& input);
// torchvision's ImageNet ResNet-18; throws UsageError for an input under 32x32.
Model make_resnet18(const InputShape& input);

// A two-level U-Net with per-pixel logits; throws UsageError unless height and width are
// multiples of 4.
Model make_unet(const InputShape& input);

// The ResNet depths the zoo builds, for error messages.
constexpr const char* kResNetDepths =
    "ResNet depth must be 6n+2 (8, 14, 20, 26, 32, ...) or 18 (the ImageNet ResNet-18)";

}  // namespace stalepipe::models::detail
