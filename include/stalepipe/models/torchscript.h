// Networks written in Python: a TorchScript file becomes a Model, and the trained Model goes
// back to TorchScript.
//
//   # Python (PyTorch 1.13):
//   torch.jit.script(torch.nn.Sequential(conv, relu, pool, flatten, linear)).save("net.pt")
//
//   auto model = stalepipe::models::load_torchscript("net.pt", {1, 32, 32, 10});
//   stalepipe::PipelineTrainer trainer(model, options);   // any schedule, executor, mitigation
//   ...
//   stalepipe::models::save_torchscript(trainer.model(), "trained.pt");  // torch.jit.load reads it
//
// What the file must hold: a scripted module (torch.jit.script, saved with torch.jit.save or
// Module::save) whose forward takes [N, C, H, W] with the InputShape given and returns logits
// [N, num_classes] (or [N, num_classes, H, W]). The units are
//  - its top-level children, in order, where its forward runs them one after the other (a
//    torch.nn.Sequential, or a module whose forward is its children in order): each child takes
//    one tensor and returns one tensor;
//  - otherwise (residual adds, concatenations, torch.flatten, blocks inside blocks: torchvision's
//    ResNets, a U-Net) pieces of its forward: every call of a module that holds modules is
//    inlined, and a unit starts at each call of a weight layer; every tensor a piece hands to a
//    piece other than the next becomes a skip tensor (models/skips.h), so a register may sit
//    inside a block. A branch or loop stays inside one unit. Units are named after their first
//    weight layer ("layer1_0_conv2"); every Conv/ConvTranspose/Linear/Bilinear counts as a
//    weight layer (a ResNet's 1x1 projections too).
// Either way, the units' forward must equal the module's own on a test input (checked).
//
// How it trains: each child is wrapped in a torch::nn::Module that registers the child's
// parameters and buffers (recursively; "conv.weight" is registered as "conv_weight") as its
// own. They are the *same tensors* the scripted module holds, so stalepipe's optimizer,
// checkpoints, to(device) and parameters() act on the scripted module in place, and
// save_torchscript writes the trained weights. train()/eval() switch the scripted child too.
// A child that is a torch.nn.Sequential is unrolled into its children (at any depth) so that
// the layer table sees each layer's shape. Weight layers are the scripted Conv1d/2d/3d,
// ConvTranspose1d/2d/3d, Linear and Bilinear modules, counted by type name.
//
// Randomness: every forward must be exact under concurrent partitions (unit.h). A scripted
// torch.nn.Dropout, Dropout1d/2d/3d, AlphaDropout or FeatureAlphaDropout that is a unit or a
// child of a Sequential unit is replaced by stalepipe's Dropout (dropout.h) with the same p
// and kind; the file keeps its own module, which export writes back unchanged. Any other
// child whose inlined forward graph draws random numbers (aten::dropout, bernoulli, rand*,
// normal, multinomial, ...) is refused at load time, naming the module that draws.
//
// Limits: tensors a scripted module holds as plain attributes (neither parameter nor buffer)
// stay where they are; a child must not modify its input in place (unit.h; a piece that does is
// given a copy). A forward cut into pieces must not draw random numbers (no dropout), must not
// read a parameter outside a call of its layer (F.conv2d(x, self.weight)), and must hand only
// tensors across places where a register may go.
//
// Threading: load and save on one thread; the Model's units may then run forwards on
// different threads concurrently, as any Model's.
#pragma once

#include <string>

#include "stalepipe/models/model.h"

namespace stalepipe::models {

// Loads the TorchScript file `path` as a Model named after the file's stem. Throws
//  - UsageError when the file does not exist, was written by torch.save instead of
//    torch.jit.save, holds no child modules, a child draws random numbers it cannot make
//    exact, the units do not fit together or the input shape (ModelBuilder::build's checks,
//    prefixed with `path`), a forward cut into pieces breaks a limit above (naming the node or
//    the parameter), or the units compute another output than the module's own forward;
//  - RuntimeError when the file is not TorchScript PyTorch 1.13 can read (not a TorchScript
//    archive, truncated, written by an incompatible PyTorch): one line naming `path`.
Model load_torchscript(const std::string& path, const InputShape& input);

// The same network with a deep copy of the scripted module's tensors (models::independent_copy).
Model copy_torchscript(const Model& model);

// Writes `model`'s scripted module with its current (trained) tensors to `path`, in eval
// mode, so that torch.jit.load(path) in Python evaluates what the Model's units compute; the
// model's own train/eval mode is left as it was. Throws UsageError when `model` did not come
// from load_torchscript, RuntimeError when the file cannot be written.
void save_torchscript(const Model& model, const std::string& path);

}  // namespace stalepipe::models
