#include "stalepipe/models/torchscript.h"

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/version.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/model_builder.h"
#include "torchscript_impl.h"

namespace stalepipe::models {
namespace {

using detail::display_type_name;
using detail::script_type_name;

// Where a scripted module sits, for messages.
struct Origin {
  std::string file;
  size_t unit = 0;  // 1-based
};

// The deepest module under `module` (at `path`) whose forward has the random operation.
std::pair<std::string, torch::jit::Module> drawing_module(const torch::jit::Module& module,
                                                          const std::string& path) {
  for (const auto& child : module.named_children()) {
    if (detail::random_op(child.value)) return drawing_module(child.value, path + "." + child.name);
  }
  return {path, module};
}

void refuse_random_draws(const torch::jit::Module& module, const std::string& path,
                         const Origin& origin) {
  const auto op = detail::random_op(module);
  if (!op) return;
  const auto [where, drawing] = drawing_module(module, path);
  const std::string unit = c10::str(origin.file, ": unit ", origin.unit, " (", where, ", ",
                                    display_type_name(script_type_name(drawing)), ") calls ", op->name);
  const char* const remedy =
      "; use torch.nn.Dropout (Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout) as a unit "
      "or as a child of a torch.nn.Sequential unit, where stalepipe replaces it with its exact "
      "dropout, or remove the draw";
  if (op->draw == detail::RandomDraw::kUnknown) {
    throw UsageError(c10::str(unit, ", an operation registered without the tags that say whether it "
                              "draws random numbers and not known to stalepipe not to; concurrent "
                              "partitions could not make its draws exact, so it is refused", remedy));
  }
  throw UsageError(c10::str(unit, ", which draws random numbers from PyTorch's global generator; "
                            "concurrent partitions cannot make that exact", remedy));
}

// Stalepipe's exact dropout for a scripted stock dropout module; its settings checked here, so
// that a refusal (e.g. p = 1) names the file and the unit.
torch::nn::AnyModule exact_dropout(const torch::jit::Module& module, const DropoutOptions& options,
                                   const std::string& path, const Origin& origin) {
  try {
    auto exact = torch::nn::AnyModule(Dropout(options));
    exact.ptr()->train(module.is_training());  // a file saved in eval mode keeps it
    return exact;
  } catch (const UsageError& e) {
    throw UsageError(c10::str(origin.file, ": unit ", origin.unit, " (", path, ", ",
                              display_type_name(script_type_name(module)), "): ", e.what()));
  }
}

// The stalepipe module for the scripted `module` at `path`: a Sequential is unrolled (so the
// layer table sees each child's shape and a dropout child can be replaced), a stock dropout
// becomes the exact one, anything else is held as it is.
torch::nn::AnyModule to_unit_module(const torch::jit::Module& module, const std::string& path,
                                    const Origin& origin) {
  if (const auto dropout = detail::script_dropout_options(module)) {
    return exact_dropout(module, *dropout, path, origin);
  }
  const auto children = module.named_children();
  if (detail::is_torch_nn(script_type_name(module), "Sequential") && children.size() > 0) {
    torch::nn::Sequential sequential;
    for (const auto& child : children) {
      sequential->push_back(child.name, to_unit_module(child.value, path + "." + child.name, origin));
    }
    return torch::nn::AnyModule(SequentialUnit(std::move(sequential)));
  }
  refuse_random_draws(module, path, origin);
  return torch::nn::AnyModule(detail::ScriptUnit(module));
}

// PyTorch 2 writes a `byteorder` record into every archive; 1.13 never does (so the record
// tells a LibTorch 1.x reader only).
bool written_by_newer_pytorch(const std::string& path) {
  try {
    return caffe2::serialize::PyTorchStreamReader(path).hasRecord("byteorder");
  } catch (const std::exception&) {
    return false;
  }
}

// torch.save writes the same zip archive as torch.jit.save, with the pickled data but without
// the code and constants: the user's mistake (a state dict, a pickled module), not damage.
bool is_torch_save_archive(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    return reader.hasRecord("data.pkl") && !reader.hasRecord("constants.pkl");
  } catch (const std::exception&) {
    return false;
  }
}

torch::jit::Module read_script(const std::string& path) {
  SP_CHECK_ARG(!std::filesystem::is_directory(path), path,
               ": is a directory; expected a TorchScript module file saved with torch.jit.save");
  SP_CHECK_ARG(std::filesystem::is_regular_file(path), path,
               ": no such file; expected a TorchScript module saved with torch.jit.save");
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {  // c10::Error, or the script compiler's ErrorReport
    SP_CHECK_ARG(!is_torch_save_archive(path), path,
                 ": holds data saved with torch.save (a state dict, a tensor or a pickled "
                 "module), not a TorchScript module; save torch.jit.script(net) with torch.jit.save");
    const std::string reader = c10::str("LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR);
    SP_CHECK_ARG(TORCH_VERSION_MAJOR >= 2 || !written_by_newer_pytorch(path), path, ": saved by a PyTorch newer than the ", reader,
                 " that reads it (the archive has PyTorch 2's byteorder record), with code ", reader,
                 " cannot run (", detail::script_error_cause(e), "); script and save the network with the PyTorch of ",
                 reader, ", or build stalepipe against the newer PyTorch's "
                 "LibTorch (docs/performance.md)");
    throw RuntimeError(c10::str(path, ": not a TorchScript module ", reader, " can read (",
                                detail::script_error_cause(e), ")"));
  }
  detail::check_record_crcs(path);
  return module;
}

// A weight that is NaN or infinite would only show as outputs that differ from themselves.
void check_finite(const torch::jit::Module& script, const std::string& path) {
  size_t unit = 0;
  for (const auto& child : script.named_children()) {
    ++unit;
    auto check = [&](const char* what, const std::string& name, const torch::Tensor& t) {
      SP_CHECK_ARG(!t.is_floating_point() || torch::isfinite(t).all().item<bool>(), path, ": unit ", unit, " (",
                   child.name, "): ", what, " ", child.name, ".", name,
                   " is not finite (it holds NaN or infinity); stalepipe trains from finite weights only");
    };
    for (const auto& p : child.value.named_parameters(/*recurse=*/true)) check("parameter", p.name, p.value);
    for (const auto& b : child.value.named_buffers(/*recurse=*/true)) check("buffer", b.name, b.value);
  }
}

// ModelBuilder::build() makes LibTorch's stock dropout modules exact (dropout.h); one left
// over would draw from the global generator, different masks on every thread.
void check_no_stock_dropout(const Model& model, const std::string& path) {
  for (size_t i = 0; i < model.units.size(); ++i) {
    for (const auto& m : model.units[i].module.ptr()->modules()) {
      SP_CHECK_ARG(!m->as<torch::nn::Dropout>() && !m->as<torch::nn::Dropout2d>() &&
                       !m->as<torch::nn::AlphaDropout>() && !m->as<torch::nn::FeatureAlphaDropout>(),
                   path, ": unit ", i + 1, " (", model.units[i].name, ") holds a dropout that ",
                   "ModelBuilder did not make exact (", m->name(), "); this build of stalepipe "
                   "cannot train it under concurrent partitions");
    }
  }
}

// Puts the scripted module and the model's units in eval mode for its lifetime, then gives
// every unit and every scripted submodule back its own `training` flag (train(bool) would set
// one flag for all, e.g. unfreeze a batch norm the file keeps in eval mode).
class EvalScope {
 public:
  EvalScope(torch::jit::Module script, const Model* model) : model_(model) {
    for (const torch::jit::Module& m : script.modules()) {
      if (m.hasattr("training")) script_flags_.emplace_back(m, m.attr("training").toBool());
    }
    if (model_) {
      for (const Unit& unit : model_->units) unit_flags_.push_back(unit.module.ptr()->is_training());
      for (const Unit& unit : model_->units) unit.module.ptr()->eval();
    }
    script.eval();
  }
  ~EvalScope() {
    for (size_t i = 0; i < unit_flags_.size(); ++i) model_->units[i].module.ptr()->train(unit_flags_[i]);
    for (auto& [module, training] : script_flags_) module.setattr("training", training);
  }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  const Model* model_;
  std::vector<std::pair<torch::jit::Module, bool>> script_flags_;
  std::vector<bool> unit_flags_;
};

// The units must compute what the module's own forward computes, or training them would train
// something else than what save_torchscript writes.
void check_units_compute_forward(const torch::jit::Module& script, const Model& model, const std::string& path) {
  torch::NoGradGuard no_grad;
  EvalScope eval(script, &model);
  const InputShape& in = model.input;
  const auto x = torch::linspace(-1, 1, 2 * in.channels * in.height * in.width)
                     .reshape({2, in.channels, in.height, in.width});
  torch::Tensor own;
  try {
    own = torch::jit::Module(script).forward({x}).toTensor();
  } catch (const std::exception& e) {
    throw UsageError(c10::str(path, ": the module's own forward fails on the input ", x.sizes(),
                              ": ", detail::script_error_cause(e)));
  }
  const torch::Tensor units = model.forward(x);
  SP_CHECK_ARG(own.sizes() == units.sizes() && torch::allclose(own, units, 1e-5, 1e-6), path,
               ": the units stalepipe made of the module compute another output than its own forward "
               "(a forward that depends on state the units do not see); write the network as a "
               "torch.nn.Sequential, or as modules whose forward uses only its input and their layers");
}

// Whether the module's own forward (not inlined) calls each of its children once, in order, each
// on the previous one's output, and returns the last one's: then each child is a unit.
bool forward_is_children_in_order(const torch::jit::Module& script) {
  const auto graph = script.get_method("forward").graph();
  if (graph->inputs().size() != 2) return false;
  std::vector<std::string> children;
  for (const auto& child : script.named_children()) children.push_back(child.name);
  size_t next = 0;
  torch::jit::Value* current = graph->inputs()[1];
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::prim::Constant) continue;
    if (node->kind() == c10::prim::GetAttr && node->input(0) == graph->inputs()[0]) continue;
    const bool call = node->kind() == c10::prim::CallMethod && node->s(c10::attr::name) == "forward" &&
                      node->inputs().size() == 2 && node->input(1) == current && next < children.size() &&
                      node->input(0)->node()->kind() == c10::prim::GetAttr &&
                      node->input(0)->node()->input(0) == graph->inputs()[0] &&
                      node->input(0)->node()->s(c10::attr::name) == children[next];
    if (!call) return false;
    current = node->output();
    ++next;
  }
  return next == children.size() && graph->outputs().size() == 1 && graph->outputs()[0] == current;
}

// A module whose forward is not its children in order: its forward cut into pieces
// (torchscript_impl.h, cut_script_forward).
Model load_pieces(const torch::jit::Module& script, const std::string& path, const InputShape& input) {
  std::vector<detail::ScriptPiece> pieces;
  try {
    pieces = detail::cut_script_forward(script, path, input);
  } catch (const c10::Error& e) {  // LibTorch's own checks, in one line
    throw UsageError(c10::str(path, ": the forward cannot be cut into pieces: ", detail::script_error_cause(e)));
  }
  ModelBuilder builder(std::filesystem::path(path).stem().string(), input);
  for (auto& piece : pieces) {
    builder.add_any(piece.name, piece.module,
                    UnitOptions()
                        .weight_layers(piece.weight_layers)
                        .pops(piece.skips.pops)
                        .stashes(piece.skips.stashes)
                        .joined(piece.joined));
  }
  Model model;
  try {
    model = builder.build();
  } catch (const UsageError& e) {
    throw UsageError(c10::str(path, ": ", e.what()));
  }
  // Every parameter must belong to a unit, or training would leave it as it is.
  std::set<const void*> trained;
  for (const Unit& unit : model.units) {
    for (const auto& p : unit.module.ptr()->parameters()) trained.insert(p.unsafeGetTensorImpl());
  }
  for (const auto& p : script.named_parameters(/*recurse=*/true)) {
    SP_CHECK_ARG(trained.count(p.value.unsafeGetTensorImpl()), path, ": parameter ", p.name, " is read by no piece "
                 "of the forward stalepipe cut (unused, or read only by code that the module's settings rule "
                 "out), so no partition would train it; remove it from the module");
  }
  return model;
}

// Each child a unit, a Sequential child unrolled.
Model load_children(const torch::jit::Module& script, const std::string& path, const InputShape& input) {
  ModelBuilder builder(std::filesystem::path(path).stem().string(), input);
  Origin origin{path, 0};
  for (const auto& child : script.named_children()) {
    ++origin.unit;
    builder.add_any(child.name, to_unit_module(child.value, child.name, origin),
                    UnitOptions().weight_layers(detail::count_script_weight_layers(child.value)));
  }
  Model model;
  try {
    model = builder.build();
  } catch (const UsageError& e) {
    throw UsageError(c10::str(path, ": ", e.what()));
  }
  check_no_stock_dropout(model, path);
  return model;
}

// `path` names the file in messages; the model is named after its stem.
Model model_of_script(const torch::jit::Module& script, const std::string& path, const InputShape& input) {
  SP_CHECK_ARG(script.named_children().size() > 0, path,
               ": the scripted module has no child modules; stalepipe makes one unit of each "
               "top-level child, e.g. of each layer of a torch.nn.Sequential");
  check_finite(script, path);
  const bool chain = detail::is_torch_nn(script_type_name(script), "Sequential") || forward_is_children_in_order(script);
  Model model = chain ? load_children(script, path, input) : load_pieces(script, path, input);
  check_units_compute_forward(script, model, path);
  model.script = std::make_shared<torch::jit::Module>(script);
  return model;
}

}  // namespace

Model load_torchscript(const std::string& path, const InputShape& input) {
  return model_of_script(read_script(path), path, input);
}

Model copy_torchscript(const Model& model) {
  SP_CHECK_ARG(model.script != nullptr, "model ", model.name, " was not loaded from TorchScript");
  Model copy = model_of_script(model.script->clone(), model.name, model.input);
  copy.name = model.name;
  return copy;
}

void save_torchscript(const Model& model, const std::string& path) {
  SP_CHECK_ARG(model.script != nullptr, "model ", model.name,
               " was not loaded from TorchScript (models::load_torchscript); only such a model "
               "can be saved as TorchScript");
  EvalScope eval(*model.script, nullptr);  // the file is for inference; the Model keeps its mode
  try {
    torch::jit::Module(*model.script).save(path);
  } catch (const std::exception& e) {
    throw RuntimeError(c10::str(path, ": cannot write the TorchScript module: ", detail::script_error_cause(e)));
  }
}

}  // namespace stalepipe::models
