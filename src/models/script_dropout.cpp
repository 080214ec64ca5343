// The one place where a scripted stock dropout module becomes a unit module.
//
// Until models/dropout.cpp is merged this returns LibTorch's stock module of the same kind
// and p, which ModelBuilder::build() replaces with stalepipe's exact Dropout (dropout.h: it
// replaces stock dropout modules that are units or inside Sequentials, as these are). Once
// Dropout links, `return torch::nn::AnyModule(Dropout(options));` says the same directly.
#include <torch/nn/modules/dropout.h>

#include "torchscript_impl.h"

namespace stalepipe::models::detail {

torch::nn::AnyModule exact_dropout(const DropoutOptions& options) {
  const double p = options.p();
  switch (options.kind()) {
    case DropoutKind::kElement:
      return torch::nn::AnyModule(torch::nn::Dropout(p));
    case DropoutKind::kFeature:
      return torch::nn::AnyModule(torch::nn::Dropout2d(p));
    case DropoutKind::kAlpha:
      return torch::nn::AnyModule(torch::nn::AlphaDropout(p));
    case DropoutKind::kFeatureAlpha:
      return torch::nn::AnyModule(torch::nn::FeatureAlphaDropout(p));
  }
  return {};
}

}  // namespace stalepipe::models::detail
