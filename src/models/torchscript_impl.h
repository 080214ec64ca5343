// Private pieces of models/torchscript.h: the unit that holds a scripted module, and what is
// read from a scripted module's type and graph.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/script.h>

#include "stalepipe/models/blocks.h"
#include "stalepipe/models/dropout.h"

namespace stalepipe::models::detail {

// One scripted module as a unit. Its parameters and buffers are the scripted module's own
// tensors (not copies), registered with '.' replaced by '_', so that training, checkpoints and
// to(device) act on the scripted module in place.
class ScriptUnitImpl : public torch::nn::Module, public FlopCounted {
 public:
  explicit ScriptUnitImpl(torch::jit::Module script);
  torch::Tensor forward(torch::Tensor x);
  // Switches the scripted module's `training` attributes too (dropout, batch norm read them).
  void train(bool on = true) override;
  // FLOPs of one forward as the autograd profiler counts them: aten::conv2d and the matrix
  // products (mm, addmm, bmm), 2 per multiply-add; other convolutions count 0.
  double forward_flops(const std::vector<int64_t>& input_shape) const override;

 private:
  mutable torch::jit::Module script_;  // forward_flops runs a forward
};
TORCH_MODULE(ScriptUnit);

// One line for an error a scripted forward threw: the interpreter's cause after its traceback
// ("RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."), else the first line.
std::string script_error_cause(const std::exception& error);

// The module's class without "__torch__" and "___torch_mangle_N":
// "torch.nn.modules.conv.Conv2d", "MyBlock"; "?" for a module without a class name.
std::string script_type_name(const torch::jit::Module& module);
// "torch.nn.modules.conv.Conv2d" -> "torch.nn.Conv2d" (how Python users write it).
std::string display_type_name(const std::string& type);
// Whether `type` is torch.nn's class `name` (e.g. "Sequential").
bool is_torch_nn(const std::string& type, const std::string& name);

// Conv1d/2d/3d, ConvTranspose1d/2d/3d, Linear and Bilinear modules in `module`, itself included.
int count_script_weight_layers(const torch::jit::Module& module);

// Whether the inlined forward graph of `module` calls an ATen op that draws random numbers.
bool draws_random_numbers(const torch::jit::Module& module);

// The exact-dropout settings for a scripted stock dropout module (Dropout, Dropout1d/2d/3d,
// AlphaDropout, FeatureAlphaDropout; p read from its attribute); nullopt for any other module.
std::optional<DropoutOptions> script_dropout_options(const torch::jit::Module& module);

}  // namespace stalepipe::models::detail
