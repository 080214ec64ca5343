#include "stalepipe/models/zoo.h"

#include <cctype>

#include <torch/nn/init.h>

#include "builder_impl.h"

namespace stalepipe::models {
namespace detail {

void init_convs_kaiming(Model& model) {
  torch::NoGradGuard no_grad;
  for (const Unit& unit : model.units) {
    for (const auto& module : unit.module.ptr()->modules()) {
      if (auto* conv = module->as<torch::nn::Conv2d>()) {
        torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
        if (conv->bias.defined()) {
          conv->bias.zero_();
        }
      } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
        bn->weight.fill_(1.0);
        bn->bias.zero_();
      }
    }
  }
}

}  // namespace detail

namespace {

constexpr const char* kResNetPrefix = "resnet";

std::string joined_names() {
  std::string text;
  for (const std::string& name : model_names()) {
    text += (text.empty() ? "" : ", ") + name;
  }
  return text;
}

// "resnet<digits>" -> depth; any other suffix is a usage error naming what was found.
int64_t parse_resnet_depth(const std::string& name) {
  const std::string suffix = name.substr(std::string(kResNetPrefix).size());
  // Nine digits keep the value far from overflow; such depths are rejected below anyway.
  bool digits = !suffix.empty() && suffix.size() <= 9;
  for (char c : suffix) {
    digits = digits && std::isdigit(static_cast<unsigned char>(c));
  }
  SP_CHECK_ARG(digits, "model ", name, ": ", detail::kResNetDepths, ", got '", suffix, "'");
  return std::stoll(suffix);
}

}  // namespace

std::vector<std::string> model_names() {
  return {"lenet5", "alexnet", "vgg16", "resnet18", "resnet<6n+2>", "unet"};
}

bool has_dropout_placement(const std::string& name) { return name == "alexnet" || name == "vgg16"; }

bool prefers_channels_last(const std::string& name) {
  return name == "lenet5" || name.rfind(kResNetPrefix, 0) == 0;
}

Model make_model(const std::string& name, const InputShape& input, const ZooOptions& options) {
  SP_CHECK_ARG(options.dropout() >= 0 && options.dropout() < 1, "model ", name,
               ": dropout must be in [0, 1), got ", options.dropout());
  SP_CHECK_ARG(options.dropout() == 0 || has_dropout_placement(name), "model ", name,
               " has no dropout placement (dropout ", options.dropout(),
               "); alexnet and vgg16 have one, before each hidden fully connected layer");
  SP_CHECK_ARG(input.channels > 0 && input.height > 0 && input.width > 0 &&
                   input.num_classes > 0,
               "model ", name, ": input shape must be positive, got ", input.channels, "x",
               input.height, "x", input.width, " with ", input.num_classes, " classes");
  if (name == "lenet5") {
    return detail::make_lenet5(input);
  }
  if (name == "alexnet") {
    return detail::make_alexnet(input, options.dropout());
  }
  if (name == "vgg16") {
    return detail::make_vgg16(input, options.dropout());
  }
  if (name == "unet") {
    return detail::make_unet(input);
  }
  if (name.rfind(kResNetPrefix, 0) == 0) {
    // 18 is no 6n+2, so the ImageNet ResNet-18 shares no name with a CIFAR ResNet.
    const int64_t depth = parse_resnet_depth(name);
    return depth == 18 ? detail::make_resnet18(input) : detail::make_resnet_cifar(depth, input);
  }
  throw UsageError(c10::str("unknown model '", name, "'; expected one of: ", joined_names(),
                            " (e.g. resnet20, resnet56, resnet110)"));
}

}  // namespace stalepipe::models
