// TorchScript modules built in C++, shaped as torch.jit.script would make them from torch.nn
// modules (the same class names, e.g. "__torch__.torch.nn.modules.conv.Conv2d"), so that tests
// need no Python. Weights come from the default generator: seed it first.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/script.h>

namespace stalepipe::test {

torch::jit::Module script_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel);
torch::jit::Module script_linear(int64_t in_features, int64_t out_features);
torch::jit::Module script_relu();
// torch.nn.ReLU(inplace=True) as torch.jit.script makes it: torch.relu_ on its input.
torch::jit::Module script_relu_inplace();
torch::jit::Module script_max_pool2d(int64_t kernel);
torch::jit::Module script_flatten();
// A batch norm over channels with running statistics (buffers) and a num_batches_tracked.
torch::jit::Module script_batch_norm2d(int64_t channels);
torch::jit::Module script_dropout(double p);
// A torch.nn.Sequential of `children`, named "0", "1", ...
torch::jit::Module script_sequential(const std::vector<torch::jit::Module>& children);
// A module of class `type` with the given children and forward (TorchScript source);
// `attributes`, if given, registers what else the forward reads (a parameter, a dict) first.
torch::jit::Module script_module(const std::string& type,
                                 const std::vector<std::pair<std::string, torch::jit::Module>>& children,
                                 const std::string& forward_source,
                                 const std::function<void(torch::jit::Module&)>& attributes = {});

// Defines the forward of `module` (TorchScript source), which may call the free functions that
// `functions_source` defines, as prim::CallFunction: as torch.jit.script compiles the Python
// functions a forward calls (torch.nn.functional's among them).
void define_with_functions(torch::jit::Module& module, const std::string& functions_source,
                           const std::string& forward_source);

// A small CNN for 1x8x8 inputs and 3 classes as a scripted Sequential of 3 units:
//   0: Sequential(Conv2d(1, 4, 3), BatchNorm2d(4), ReLU, MaxPool2d(2))  -> 4x3x3, 1 weight layer
//   1: Flatten                                                        -> 36, no weight layer
//   2: Sequential(Linear(36, 16), ReLU, Linear(16, 3))                 -> 3, 2 weight layers
torch::jit::Module script_small_cnn();

// A TorchScript archive that claims format version 99, as a PyTorch newer than 1.13 might
// write; returns `path`.
std::string save_future_archive(const std::string& path);
// An archive as Python's torch.save writes it (pickled data, no code); returns `path`.
std::string save_torch_save_archive(const std::string& path);

// Flips one bit of the first byte of record `record` (e.g. "data/0", the first tensor) of the
// archive at `path`, leaving the CRC-32 its zip directory records as it was; returns `path`.
std::string damage_record(const std::string& path, const std::string& record);

// Saves `module` to `path` (Module::save, as torch.jit.save does) and returns `path`.
std::string save_script(torch::jit::Module module, const std::string& path);

}  // namespace stalepipe::test
