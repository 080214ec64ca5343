// Private pieces of models/torchscript.h: the unit that holds a scripted module, and what is
// read from a scripted module's type and graph.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/script.h>

#include "stalepipe/models/blocks.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/model.h"
#include "stalepipe/models/unit.h"

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
  // From the forward graph's alias analysis: whether it may write into its input, and whether
  // its output may be the input or a view of it (models/in_place.h).
  bool writes_input() const { return writes_input_; }
  bool may_return_input() const { return may_return_input_; }

 private:
  mutable torch::jit::Module script_;  // forward_flops runs a forward
  bool writes_input_ = false;
  bool may_return_input_ = false;
};
TORCH_MODULE(ScriptUnit);

// What a piece's graph uses of the scripted module, by attribute path from it ("layer1.0.conv1").
struct PieceUses {
  std::set<std::string> calls;    // the layers it calls
  std::set<std::string> tensors;  // the tensors it reads itself (a batch norm's, a layer scale)
  std::set<std::string> flags;    // the modules whose training flag it reads
  std::set<std::string> caches;   // the dicts it writes into (a cache of values made from weights)
  std::set<std::string> tensor_lists;  // lists of its module's tensors it reads (an LSTM's weights)
};

// A piece of a scripted module's forward that is not its children in order, as a unit: the
// forward's nodes between two weight layers as a graph of their own, run with the whole
// scripted module as `self`: {main, popped...} -> {output, stashed...} (models/skips.h). Its
// parameters and buffers are those of the layers it calls and those it reads itself ('.'
// replaced by '_'), the scripted module's own tensors; train() switches those layers and flags
// only, and empties the dicts it writes into. An input it writes into is copied first. Its random draws come from unit_generator()
// (make_draws_exact).
class ScriptSegmentImpl : public torch::nn::Module, public FlopCounted, public RandomDrawing {
 public:
  ScriptSegmentImpl(torch::jit::Module script, std::shared_ptr<torch::jit::Graph> graph, const PieceUses& uses,
                    const std::string& name);
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> inputs);
  void train(bool on = true) override;
  // As ScriptUnit counts them, per leading element of the main input (a sample; a window where
  // the piece's input holds windows): on inputs shaped as the last forward's, with the numbers
  // it was handed.
  double forward_flops(const std::vector<int64_t>& input_shape) const override;
  bool draws_random_numbers() const override { return draws_; }

 private:
  torch::jit::Module script_;
  std::shared_ptr<torch::jit::GraphFunction> function_;
  std::vector<torch::jit::Module> modules_;  // the layers it calls
  std::vector<torch::jit::Module> flagged_;  // modules whose training flag it reads
  std::vector<std::pair<torch::jit::Module, std::string>> caches_;  // dicts it fills: owner, name
  std::vector<size_t> written_;              // inputs its graph writes into
  std::vector<std::vector<int64_t>> shapes_;  // of the last forward's inputs
  std::vector<torch::Tensor> numbers_;        // its inputs that are numbers: of no dimensions or of
                                              // integers (a list of sizes); else undefined
  bool draws_ = false;
};
TORCH_MODULE(ScriptSegment);

// The same for a piece without skip tensors: forward Tensor(Tensor).
class ScriptChainSegmentImpl : public ScriptSegmentImpl {
 public:
  using ScriptSegmentImpl::ScriptSegmentImpl;
  torch::Tensor forward(torch::Tensor x) { return ScriptSegmentImpl::forward({std::move(x)}).front(); }
};
TORCH_MODULE(ScriptChainSegment);

struct ScriptPiece {
  std::string name;  // the first layer it calls, "layer1_0_conv2"
  torch::nn::AnyModule module;
  int weight_layers = 0;
  Skips skips;
  std::string joined;  // why pieces that could have been cut apart are this one (Unit::joined)
};
// Cuts the forward of `script` into units: every call but those of weight layers (Conv*,
// ConvTranspose*, Linear, Bilinear) is inlined at any depth, functions included; the module's
// settings (non-tensor attributes other than `training` that the forward never assigns) become
// constants and fold away the branches they rule out; random draws are made exact
// (make_draws_exact). A unit starts at each weight layer (a call of one, or a convolution or
// linear map called on a weight made from the module's tensors, with what makes that weight)
// where the unit before hands it a tensor; branches and loops stay inside one unit. Numbers
// cross as tensors of no dimensions, lists of tensors whose length samples of `input`'s shape
// show fixed as their tensors. Where anything else would cross from one unit to a later one,
// or two units would read one parameter or buffer, the units between are one
// (ScriptPiece::joined says why). Each tensor a unit reads from a unit before the previous one,
// or besides the one it continues from, becomes a skip tensor. A parameter or buffer belongs to the unit that reads it or calls its layer.
// Throws UsageError naming `file` for a forward that does not take and return one tensor or a
// draw that cannot be made exact (naming the node).
std::vector<ScriptPiece> cut_script_forward(const torch::jit::Module& script, const std::string& file,
                                           const InputShape& input);

// FLOPs of what `run` computes, as the autograd profiler counts them (as ScriptUnit's).
double profiled_flops(const std::function<void()>& run);
// "conv.weight" -> "conv_weight".
std::string flat_name(std::string name);

// Throws RuntimeError naming `path` and the record whose CRC-32 differs from the one the zip
// directory records (LibTorch's reader does not check them).
void check_record_crcs(const std::string& path);

// One line for an error a scripted forward threw: the interpreter's cause after its traceback
// ("RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."), else the first line.
std::string script_error_cause(const std::exception& error);

// The module's class without "__torch__" and "___torch_mangle_N":
// "torch.nn.modules.conv.Conv2d", "MyBlock"; "?" for a module without a class name.
std::string script_type_name(const torch::jit::Module& module);
std::string script_type_name(const c10::ClassType& type);
// "torch.nn.modules.conv.Conv2d" -> "torch.nn.Conv2d" (how Python users write it).
std::string display_type_name(const std::string& type);
// Whether `type` is torch.nn's class `name` (e.g. "Sequential").
bool is_torch_nn(const std::string& type, const std::string& name);

// Conv1d/2d/3d, ConvTranspose1d/2d/3d, Linear and Bilinear modules in `module`, itself included.
int count_script_weight_layers(const torch::jit::Module& module);

// Makes every random draw in `graph` come from the unit generator (models/dropout.h): dropout
// operations become stalepipe's dropout, one with p = 0 or train = False (a constant) is
// removed; an operation that takes a Generator gets unit_generator(device) of the device it
// draws on. Throws UsageError naming `file` and the node for a draw that cannot be given one.
void make_draws_exact(torch::jit::Graph& graph, const std::string& file);
// Whether a graph that make_draws_exact rewrote draws.
bool draws_random_numbers(const torch::jit::Graph& graph);
// "aten::rand_like at model.py:31": a node and where it sits in the source, for messages.
std::string script_node_place(const torch::jit::Node& node);

// An operation in a forward that draws random numbers (kDraws: its registration says so), or
// that stalepipe cannot tell about (kUnknown: registered without tags and not known to it).
enum class RandomDraw { kNone, kDraws, kUnknown };
struct RandomOp {
  std::string name;  // "aten::binomial"
  RandomDraw draw = RandomDraw::kDraws;
};
RandomDraw node_draw(const torch::jit::Node& node);
// Generator or Generator?.
bool is_generator_type(c10::TypePtr type);
// The first such operation in the inlined forward graph of `module`, if any.
std::optional<RandomOp> random_op(const torch::jit::Module& module);

// The exact-dropout settings for a scripted stock dropout module (Dropout, Dropout1d/2d/3d,
// AlphaDropout, FeatureAlphaDropout; p read from its attribute); nullopt for any other module.
std::optional<DropoutOptions> script_dropout_options(const torch::jit::Module& module);

}  // namespace stalepipe::models::detail
