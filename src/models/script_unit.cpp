#include <algorithm>

#include <ATen/core/dispatch/Dispatcher.h>

#include <ATen/record_function.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "stalepipe/common/error.h"
#include "torchscript_impl.h"

namespace stalepipe::models::detail {
namespace {

// Whether an operation draws random numbers is read from its registration, not from its name:
// every native ATen operator that takes a Generator or draws from the global one carries the
// `nondeterministic_seeded` tag (torchgen refuses to build one that lacks it), in LibTorch 1.13
// and 2.x alike. Operators the interpreter registers itself have no dispatcher entry and so no
// tags: those in prim:: run the program (constants, control flow, attributes), those that touch
// no tensor are arithmetic on numbers, strings and lists, and those that touch tensors are
// listed below as known not to draw (all of 1.13's and 2.11's but the two that draw). Anything else cannot be vouched for and is refused, as
// the ones that do draw are (aten::_no_grad_normal_, aten::_no_grad_uniform_ of nn.init).
const char* const kDeterministicInterpreterOps[] = {
    "aten::Bool", "aten::Complex", "aten::ComplexImplicit", "aten::Delete", "aten::Float",
    "aten::FloatImplicit", "aten::Int", "aten::IntImplicit", "aten::ScalarImplicit",
    "aten::__contains__", "aten::__getitem__", "aten::__interpolate", "aten::__upsample",
    "aten::__upsample_bilinear", "aten::__upsample_nearest", "aten::_grad_sum_to_size",
    "aten::_index_put_impl_", "aten::_list_to_tensor", "aten::_ncf_unsqueeze", "aten::_ncf_view",
    "aten::_no_grad_embedding_renorm_", "aten::_no_grad_fill_", "aten::_no_grad_zero_",
    "aten::_pack_sequence", "aten::_set_item", "aten::_tensor_to_list", "aten::_unsafe_index",
    "aten::_unsafe_index_put", "aten::as_tensor", "aten::clear", "aten::copy", "aten::copy_", "aten::count", "aten::cpu", "aten::cuda",
    "aten::dequantize", "aten::dict", "aten::dim", "aten::einsum", "aten::element_size",
    "aten::eq", "aten::get", "aten::get_device", "aten::index", "aten::index_put",
    "aten::index_put_", "aten::is_contiguous", "aten::is_non_overlapping_and_dense",
    "aten::is_strides_like_format", "aten::items", "aten::keys", "aten::len", "aten::mH",
    "aten::mT", "aten::matrix_H", "aten::ne", "aten::numel", "aten::numpy_T", "aten::pop",
    "aten::popitem", "aten::remove", "aten::setdefault", "aten::size", "aten::sort",
    "aten::sorted", "aten::split", "aten::storage_offset", "aten::stride", "aten::sym_numel",
    "aten::sym_size", "aten::sym_storage_offset", "aten::sym_stride", "aten::tensor", "aten::to",
    "aten::update", "aten::values"};

bool holds_tensors(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  const auto contained = type->containedTypes();
  return std::any_of(contained.begin(), contained.end(), holds_tensors);
}

// What an interpreter-registered operation (no tags) is known to be.
RandomDraw interpreter_op_draw(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  if (name.rfind("prim::", 0) == 0) return RandomDraw::kNone;
  for (const char* op : kDeterministicInterpreterOps) {
    if (name == op) return RandomDraw::kNone;
  }
  const auto tensors = [](const std::vector<c10::Argument>& args) {
    return std::any_of(args.begin(), args.end(), [](const c10::Argument& a) { return holds_tensors(a.type()); });
  };
  return tensors(schema.arguments()) || tensors(schema.returns()) ? RandomDraw::kUnknown : RandomDraw::kNone;
}

std::optional<RandomOp> block_random_op(torch::jit::Block* block) {
  for (torch::jit::Node* node : block->nodes()) {
    const RandomDraw draw = node_draw(*node);
    if (draw != RandomDraw::kNone) return RandomOp{node->kind().toQualString(), draw};
    for (torch::jit::Block* sub : node->blocks()) {
      if (auto found = block_random_op(sub)) return found;
    }
  }
  return std::nullopt;
}

// FLOPs (2 per multiply-add) of the convolutions and matrix products a forward runs, counted
// from each operation's real arguments by a RecordFunction callback on the counting thread. Only
// the outermost counted operation counts: aten::linear runs aten::addmm, which is not counted
// again.
struct FlopCount {
  double flops = 0;
  int depth = 0;  // counted operations running
};
thread_local FlopCount* flop_count = nullptr;

enum class Product { kNone, kConvolution, kLinear, kMatrix };

Product product_of(const char* name) {
  const std::string op = name;
  if (op == "aten::convolution" || op == "aten::_convolution") return Product::kConvolution;
  if (op == "aten::linear") return Product::kLinear;
  for (const char* matrix : {"aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                             "aten::addbmm", "aten::mv", "aten::addmv"}) {
    if (op == matrix) return Product::kMatrix;
  }
  return Product::kNone;
}

struct CountedOp final : at::ObserverContext {
  Product product = Product::kNone;
  bool outermost = false;
  double per_output = 0;  // multiply-adds per output element
  double fixed = 0;       // or in all, known from the inputs
};

// Multiply-adds of a counted operation, from its inputs as it starts (the interpreter reuses
// their stack slots for the outputs): each output element of a convolution takes
// weight.numel() / weight.size(0) of them (C_in/groups x kernel), each input element of a
// transposed one as many; each output element of a matrix product the contracted length.
void count_inputs(const at::RecordFunction& fn, CountedOp& op) {
  const auto inputs = fn.inputs();
  // The interpreter may show stack slots before the operation's own arguments: they end the
  // inputs.
  size_t first = 0;
  if (const auto schema = fn.operator_schema(); schema && inputs.size() > schema->arguments().size()) {
    first = inputs.size() - schema->arguments().size();
  }
  auto argument = [&](size_t i) { return first + i < inputs.size() ? inputs[first + i] : c10::IValue(); };
  auto tensor = [&](size_t i) { return argument(i).isTensor() ? argument(i).toTensor() : at::Tensor(); };
  if (op.product == Product::kConvolution) {
    const auto weight = tensor(1);
    if (!weight.defined() || weight.dim() == 0) return;
    const double per_element = static_cast<double>(weight.numel() / weight.size(0));
    const bool transposed = argument(6).isBool() && argument(6).toBool();
    if (transposed) {
      op.fixed = per_element * static_cast<double>(tensor(0).numel());
    } else {
      op.per_output = per_element;
    }
    return;
  }
  if (op.product == Product::kLinear) {
    const auto weight = tensor(1);
    if (weight.defined() && weight.dim() == 2) op.per_output = static_cast<double>(weight.size(1));
    return;
  }
  // The first matrix operand: mm/matmul/bmm/mv (a, b), the add forms (c, a, b).
  const std::string name = fn.name();
  const auto a = tensor(name.rfind("aten::add", 0) == 0 || name == "aten::baddbmm" ? 1 : 0);
  if (!a.defined() || a.dim() == 0) return;
  op.per_output = static_cast<double>(a.size(-1)) * static_cast<double>(name == "aten::addbmm" ? a.size(0) : 1);
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  auto op = std::make_unique<CountedOp>();
  op->product = product_of(fn.name());
  if (flop_count && op->product != Product::kNone) {
    op->outermost = flop_count->depth++ == 0;
    if (op->outermost) count_inputs(fn, *op);
  }
  return op;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  const auto* op = static_cast<const CountedOp*>(context);
  if (!flop_count || !op || op->product == Product::kNone) return;
  --flop_count->depth;
  if (!op->outermost) return;
  const auto outputs = fn.outputs();
  const double out = !outputs.empty() && outputs[0].isTensor() ? static_cast<double>(outputs[0].toTensor().numel()) : 0;
  flop_count->flops += 2 * (op->fixed + op->per_output * out);
}

// The inlined forward graph of `module` (calls of submodules' methods replaced by their code);
// null where it has no forward.
std::shared_ptr<torch::jit::Graph> inlined_forward(const torch::jit::Module& module) {
  const auto forward = module.find_method("forward");
  if (!forward) return nullptr;
  std::shared_ptr<torch::jit::Graph> graph = forward->graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
}

}  // namespace

RandomDraw node_draw(const torch::jit::Node& node) {
  const c10::FunctionSchema* schema = node.maybeSchema();
  if (!schema) return RandomDraw::kNone;  // an instruction of the interpreter: If, Loop, GetAttr, ...
  const auto& args = schema->arguments();
  if (std::any_of(args.begin(), args.end(), [](const c10::Argument& a) { return is_generator_type(a.type()); })) {
    return RandomDraw::kDraws;
  }
  const auto op = c10::Dispatcher::singleton().findOp(schema->operator_name());
  if (!op) return interpreter_op_draw(*schema);
  return op->hasTag(at::Tag::nondeterministic_seeded) ? RandomDraw::kDraws : RandomDraw::kNone;
}

bool is_generator_type(c10::TypePtr type) {
  if (const auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::GeneratorType;
}

std::string script_node_place(const torch::jit::Node& node) {
  std::string text = node.kind().toQualString();
  if (const auto range = node.sourceRange().file_line_col()) {
    const auto& [file, line, col] = *range;
    text += c10::str(" at ", file, ":", line);
  }
  return text;
}

std::string flat_name(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

double profiled_flops(const std::function<void()>& run) {
  torch::NoGradGuard no_grad;
  FlopCount count;
  flop_count = &count;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_op_start, &on_op_end).needsInputs(true).needsOutputs(true).scopes(
          {at::RecordScope::FUNCTION}));
  try {
    run();
  } catch (...) {
    at::removeCallback(handle);
    flop_count = nullptr;
    throw;
  }
  at::removeCallback(handle);
  flop_count = nullptr;
  return count.flops;
}

std::string script_error_cause(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  std::string text = error ? error->what_without_backtrace() : e.what();
  if (text.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    text.erase(text.find_last_not_of(" \n") + 1);
    return text.substr(text.rfind('\n') + 1);
  }
  text.erase(0, std::min(text.find_first_not_of(" \n"), text.size()));  // the compiler's start with a newline
  text = text.substr(0, text.find('\n'));
  // The archive reader's checks read "[enforce fail at inline_container.cc:165] . <cause>".
  const std::string enforce = "[enforce fail at ";
  if (text.rfind(enforce, 0) == 0 && text.find("] . ") != std::string::npos) {
    text = text.substr(text.find("] . ") + 4);
  }
  return text;
}

ScriptUnitImpl::ScriptUnitImpl(torch::jit::Module script)
    : torch::nn::Module("ScriptUnit(" + display_type_name(script_type_name(script)) + ")"),
      script_(std::move(script)) {
  for (const auto& p : script_.named_parameters(/*recurse=*/true)) {
    register_parameter(flat_name(p.name), p.value, p.value.requires_grad());
  }
  for (const auto& b : script_.named_buffers(/*recurse=*/true)) {
    register_buffer(flat_name(b.name), b.value);
  }
  torch::nn::Module::train(script_.is_training());
  if (const auto graph = inlined_forward(script_); graph && graph->inputs().size() == 2) {
    torch::jit::AliasDb aliases(graph);
    torch::jit::Value* input = graph->inputs()[1];  // [0] is self
    writes_input_ = aliases.hasWriters(input);
    may_return_input_ = aliases.mayContainAlias(input, graph->outputs());
  }
}

torch::Tensor ScriptUnitImpl::forward(torch::Tensor x) {
  c10::IValue out;
  try {
    out = script_.forward({std::move(x)});
  } catch (const std::exception& e) {
    // As c10::Error, the type LibTorch modules throw, with one line that names the cause.
    TORCH_CHECK(false, script_error_cause(e));
  }
  SP_CHECK_ARG(out.isTensor(), "scripted ", display_type_name(script_type_name(script_)),
               " returns a ", out.tagKind(), "; a unit must return one tensor");
  return out.toTensor();
}

void ScriptUnitImpl::train(bool on) {
  torch::nn::Module::train(on);
  script_.train(on);
}

double ScriptUnitImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  std::vector<int64_t> sizes = {1};
  sizes.insert(sizes.end(), input_shape.begin(), input_shape.end());
  auto options = torch::TensorOptions(torch::kFloat);
  const auto params = parameters();
  if (!params.empty()) options = options.dtype(params.front().dtype()).device(params.front().device());
  return profiled_flops([&] { script_.forward({torch::zeros(sizes, options)}); });
}

std::string script_type_name(const torch::jit::Module& module) { return script_type_name(*module.type()); }

std::string script_type_name(const c10::ClassType& type) {
  const auto name = type.name();
  if (!name) return "?";
  std::string text;
  for (const std::string& atom : name->atoms()) {
    if (atom == "__torch__" || atom.rfind("___torch_mangle_", 0) == 0) continue;
    text += (text.empty() ? "" : ".") + atom;
  }
  return text;
}

std::string display_type_name(const std::string& type) {
  const std::string prefix = "torch.nn.modules.";
  if (type.rfind(prefix, 0) != 0) return type;
  return "torch.nn." + type.substr(type.rfind('.') + 1);
}

bool is_torch_nn(const std::string& type, const std::string& name) {
  return type.rfind("torch.nn.modules.", 0) == 0 && type.size() > name.size() &&
         type.compare(type.size() - name.size() - 1, std::string::npos, "." + name) == 0;
}

int count_script_weight_layers(const torch::jit::Module& module) {
  static const char* const kWeightLayers[] = {"Conv1d",          "Conv2d",          "Conv3d",
                                              "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                                              "Linear",          "Bilinear"};
  int count = 0;
  for (const torch::jit::Module& m : module.modules()) {
    const std::string type = script_type_name(m);
    for (const char* name : kWeightLayers) count += is_torch_nn(type, name) ? 1 : 0;
  }
  return count;
}

std::optional<RandomOp> random_op(const torch::jit::Module& module) {
  const auto graph = inlined_forward(module);
  return graph ? block_random_op(graph->block()) : std::nullopt;
}

std::optional<DropoutOptions> script_dropout_options(const torch::jit::Module& module) {
  const std::pair<const char*, DropoutKind> kStock[] = {
      {"Dropout", DropoutKind::kElement},       {"Dropout1d", DropoutKind::kFeature},
      {"Dropout2d", DropoutKind::kFeature},     {"Dropout3d", DropoutKind::kFeature},
      {"AlphaDropout", DropoutKind::kAlpha},    {"FeatureAlphaDropout", DropoutKind::kFeatureAlpha}};
  const std::string type = script_type_name(module);
  for (const auto& [name, kind] : kStock) {
    if (is_torch_nn(type, name) && module.hasattr("p")) {
      return DropoutOptions(module.attr("p").toDouble()).kind(kind);
    }
  }
  return std::nullopt;
}

}  // namespace stalepipe::models::detail
