// A scripted module whose forward is not its children in order (residual adds, concatenations,
// torch.flatten, blocks inside blocks, functions) as units: the forward's graph, with every call
// but those of weight layers inlined, is cut before each weight layer; each piece runs as a
// graph of its own, and every tensor one piece hands to a piece other than the next becomes a
// skip tensor (models/skips.h).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/lower_tuples.h>

#include "stalepipe/common/error.h"
#include "torchscript_impl.h"

namespace stalepipe::models::detail {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

c10::ClassTypePtr module_type(const Value* v) {
  auto type = v->type()->cast<c10::ClassType>();
  return type && type->is_module() ? type : nullptr;
}

// Whether `use` only reads the list it is handed: an operator whose schema writes nothing of it
// and returns no list that aliases it. A list handed to a branch, a loop or a call may be
// written there under another name.
bool reads_list_only(const torch::jit::Use& use) {
  const c10::FunctionSchema* schema = use.user->maybeSchema();
  if (!schema || use.offset >= schema->arguments().size()) return false;
  const c10::AliasInfo* alias = schema->arguments()[use.offset].alias_info();
  if (alias && alias->isWrite()) return false;
  for (size_t i = 0; i < use.user->outputs().size() && i < schema->returns().size(); ++i) {
    if (use.user->output(i)->type()->cast<c10::ListType>() && schema->returns()[i].alias_info()) return false;
  }
  return true;
}

// Whether nothing may write into a list: its elements may still be written (they are tensors
// that cross registers as tensors do), the list itself not.
bool only_read(const Value* list) {
  const auto uses = list->uses();
  return std::all_of(uses.begin(), uses.end(), reads_list_only);
}

// Values every piece may compute again instead of receiving: constants, and attributes read
// from the module (submodules, parameters, flags), and tuples and unwritten lists of those. A
// list that appends grow (DLA's children) is one object the pieces share: none makes its own.
bool recomputable(const Value* v, const Value* self) {
  if (v == self) return true;
  const Node* node = v->node();
  if (node->kind() == c10::prim::Constant) return true;
  if (node->kind() == c10::prim::GetAttr) return recomputable(node->input(0), self);
  if ((node->kind() == c10::prim::ListConstruct && only_read(v)) || node->kind() == c10::prim::TupleConstruct) {
    return std::all_of(node->inputs().begin(), node->inputs().end(),
                       [&](const Value* in) { return recomputable(in, self); });
  }
  return false;
}

// "layer1.0.conv1": the attribute path of a value read from self ("" for self); nullopt for a
// value that is not read from self.
std::optional<std::string> attribute_path(const Value* v, const Value* self) {
  if (v == self) return "";
  if (v->node()->kind() != c10::prim::GetAttr) return std::nullopt;
  const auto outer = attribute_path(v->node()->input(0), self);
  if (!outer) return std::nullopt;
  return (outer->empty() ? "" : *outer + ".") + v->node()->s(c10::attr::name);
}

std::string module_path(const Value* v, const Value* self) {
  const auto path = attribute_path(v, self);
  SP_CHECK(path, "a module that is not an attribute of the scripted module");
  return *path;
}

// The values a node and the nodes nested in it read that are defined outside it, in order.
void outside_inputs(Node* node, const Node* top, std::vector<Value*>& out) {
  for (Value* in : node->inputs()) {
    const Node* def = in->node();
    bool inside = false;
    for (const Node* n = def; n && n->owningBlock(); n = n->owningBlock()->owningNode()) inside |= n == top;
    if (!inside && std::find(out.begin(), out.end(), in) == out.end()) out.push_back(in);
  }
  for (torch::jit::Block* block : node->blocks()) {
    for (Node* inner : block->nodes()) outside_inputs(inner, top, out);
    outside_inputs(block->return_node(), top, out);
  }
}

bool is_weight_call(const Node* node);

// The calls of weight layers in a node and the blocks nested in it (a branch, a loop), in order.
void weight_calls(const Node* node, std::vector<const Node*>& out) {
  if (is_weight_call(node)) out.push_back(node);
  for (const torch::jit::Block* block : node->blocks()) {
    for (const Node* inner : block->nodes()) weight_calls(inner, out);
  }
}

// Whether `node` computes a value from the module's tensors and constants alone, reading no
// input and writing nothing: a weight standardised, normalised or scaled before its use.
// Such a node runs in the piece that uses its value (models/torchscript_impl.h).
bool derived_from_module(const Node* node, const Value* self) {
  if (node->outputs().size() != 1 || !node->blocks().empty() || node->hasSideEffects() ||
      node->kind() == c10::prim::Param || node_draw(*node) != RandomDraw::kNone) {
    return false;
  }
  // A batch norm with running statistics updates them, though its schema does not say so.
  if (node->kind() == c10::aten::batch_norm && node->inputs().size() > 3 &&
      node->input(3)->type()->kind() != c10::TypeKind::NoneType) {
    return false;
  }
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema) {
    for (const c10::Argument& a : schema->arguments()) {
      if (a.alias_info() && a.alias_info()->isWrite()) return false;
    }
  } else if (node->kind() != c10::prim::ListConstruct && node->kind() != c10::prim::TupleConstruct) {
    return false;
  }
  bool reads_tensor = false;
  for (const Value* in : node->inputs()) {
    if (recomputable(in, self)) {
      reads_tensor |= in->node()->kind() == c10::prim::GetAttr && in->type()->kind() == c10::TypeKind::TensorType;
      continue;
    }
    if (!derived_from_module(in->node(), self)) return false;
    reads_tensor = true;
  }
  return reads_tensor;
}

// Whether a node writes into `v` itself (an in-place operation on it). AliasDb's hasWriters
// would also count writes to any tensor it cannot tell apart from the module's, which in a
// real network is every parameter.
bool written_in_place(const Value* v) {
  for (const torch::jit::Use& use : v->uses()) {
    const c10::FunctionSchema* schema = use.user->maybeSchema();
    if (!schema || use.offset >= schema->arguments().size()) continue;
    const c10::AliasInfo* alias = schema->arguments()[use.offset].alias_info();
    if (alias && alias->isWrite()) return true;
  }
  return false;
}

// The parameter or buffer a value is computed from (through derived_from_module's nodes),
// as an attribute path from self ("layer1.0.conv1.weight"); nullopt if none.
std::optional<std::string> module_tensor_source(const Value* v, const Value* self) {
  if (v->node()->kind() == c10::prim::GetAttr && v->type()->kind() == c10::TypeKind::TensorType) {
    return attribute_path(v, self);
  }
  if (!derived_from_module(v->node(), self)) return std::nullopt;
  for (const Value* in : v->node()->inputs()) {
    if (const auto path = module_tensor_source(in, self)) return path;
  }
  return std::nullopt;
}

// A convolution or linear map called as a function whose weight (its second argument) comes
// from a tensor of the module, directly or through other operations: "layer1.0.conv1.weight"
// for torch.conv2d(x, standardised(self.weight)); nullopt for any other node.
std::optional<std::string> functional_weight(const Node* node) {
  static const std::set<c10::Symbol> kinds = {
      c10::aten::conv1d, c10::aten::conv2d, c10::aten::conv3d, c10::aten::conv_transpose1d,
      c10::aten::conv_transpose2d, c10::aten::conv_transpose3d, c10::aten::convolution, c10::aten::_convolution,
      c10::aten::linear};
  if (!kinds.count(node->kind()) || node->inputs().size() < 2) return std::nullopt;
  return module_tensor_source(node->input(1), node->owningGraph()->inputs()[0]);
}

bool is_weight_call(const Node* node) {
  if (functional_weight(node)) return true;
  if (node->kind() != c10::prim::CallMethod) return false;
  const auto type = module_type(node->input(0));
  if (!type) return false;
  const std::string name = script_type_name(*type);
  for (const char* layer : {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                            "Linear", "Bilinear"}) {
    if (is_torch_nn(name, layer)) return true;
  }
  return false;
}

// The name a weight layer's piece takes: the called layer's path, or the path of the module
// that holds a functional layer's weight ("layer1.0.conv1"; the tensor's own name at the top).
std::string layer_path(const Node* layer, const Value* self) {
  if (const auto weight = functional_weight(layer)) {
    const size_t dot = weight->rfind('.');
    return dot == std::string::npos ? *weight : weight->substr(0, dot);
  }
  return module_path(layer->input(0), self);
}

// The submodule of `root` at `path` ("layer1.0.conv1"; "" is root itself).
torch::jit::Module submodule(torch::jit::Module root, const std::string& path) {
  for (size_t begin = 0; begin < path.size();) {
    const size_t end = std::min(path.find('.', begin), path.size());
    root = root.attr(path.substr(begin, end - begin)).toModule();
    begin = end + 1;
  }
  return root;
}

// Inlines every call in `block` and the blocks nested in it, but those of weight layers, until
// none is left: methods of containers and blocks, leaf layers (a batch norm's parameters become
// reads of its own), and compiled functions (F.relu, F.adaptive_avg_pool2d, ...).
void inline_calls(torch::jit::Block* block, const std::string& file) {
  for (Node* node = block->nodes().front(); node != block->return_node();) {
    torch::jit::GraphFunction* callee = nullptr;
    if (node->kind() == c10::prim::CallFunction) {
      callee = torch::jit::tryToGraphFunction(*node->input(0)->type()->expect<c10::FunctionType>()->function());
    } else if (node->kind() == c10::prim::CallMethod && !is_weight_call(node)) {
      if (const auto type = node->input(0)->type()->cast<c10::ClassType>()) {
        callee = torch::jit::tryToGraphFunction(type->getMethod(node->s(c10::attr::name)));
      }
    }
    if (!callee) {
      for (torch::jit::Block* inner : node->blocks()) inline_calls(inner, file);
      node = node->next();
      continue;
    }
    Node* before = node->prev();
    try {
      // A function's node takes the function itself first; its graph does not.
      if (node->kind() == c10::prim::CallFunction) node->removeInput(0);
      torch::jit::inlineCallTo(node, callee, callee->graph().get());
    } catch (const c10::Error& e) {
      throw UsageError(c10::str(file, ": ", script_node_place(*node), " (", callee->qualname().qualifiedName(),
                                ") cannot be inlined for cutting: ", e.what_without_backtrace()));
    }
    node = before->next();  // the inlined code, which may call in turn
  }
}

// The attribute paths (module path + "." + name) that the graph's code assigns (prim::SetAttr).
void assigned_attributes(const torch::jit::Block* block, const Value* self, std::set<std::string>& out) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr && attribute_path(node->input(0), self)) {
      out.insert(*attribute_path(node->input(0), self) + "." + node->s(c10::attr::name));
    }
    for (const torch::jit::Block* inner : node->blocks()) assigned_attributes(inner, self, out);
  }
}

// Replaces the reads of the module's settings (numbers, strings, flags other than `training`,
// never assigned by the forward) with their values, so that a branch on a setting
// (`if self.drop_rate > 0`, `if self.apply_residual`) folds away with the code it never runs.
void fold_settings(torch::jit::Block* block, const torch::jit::Module& script, const Value* self,
                   const std::set<std::string>& assigned) {
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) fold_settings(inner, script, self, assigned);
    if (node->kind() != c10::prim::GetAttr || node->s(c10::attr::name) == "training") continue;
    const auto owner = attribute_path(node->input(0), self);
    const c10::TypeKind kind = node->output()->type()->kind();
    if (!owner || (kind != c10::TypeKind::IntType && kind != c10::TypeKind::FloatType &&
                   kind != c10::TypeKind::BoolType && kind != c10::TypeKind::StringType)) {
      continue;
    }
    const std::string name = node->s(c10::attr::name);
    if (assigned.count(*owner + "." + name)) continue;
    torch::jit::WithInsertPoint guard(node);
    if (const auto value = torch::jit::tryInsertConstant(*node->owningGraph(), submodule(script, *owner).attr(name))) {
      node->output()->replaceAllUsesWith(*value);
    }
  }
}

// `x is None` where x's type cannot hold None (a list handed to an optional argument, as DLA's
// trees hand their children on): a constant once the call is inlined, so that the branch on it
// folds and the list it picks is the caller's.
void fold_none_checks(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* node = *it++;
    for (torch::jit::Block* inner : node->blocks()) fold_none_checks(inner);
    const bool is = node->kind() == c10::aten::__is__;
    if ((!is && node->kind() != c10::aten::__isnot__) || node->inputs().size() != 2) continue;
    const auto none = [](const Value* v) { return v->type()->kind() == c10::TypeKind::NoneType; };
    const auto never_none = [](const Value* v) {
      const auto kind = v->type()->kind();
      return kind != c10::TypeKind::NoneType && kind != c10::TypeKind::OptionalType && kind != c10::TypeKind::AnyType &&
             kind != c10::TypeKind::UnionType;
    };
    const Value* a = node->input(0);
    const Value* b = node->input(1);
    if (!((none(a) && never_none(b)) || (none(b) && never_none(a)))) continue;
    torch::jit::WithInsertPoint here(node);
    node->output()->replaceAllUsesWith(block->owningGraph()->insertConstant(!is));
    node->destroy();
  }
}

// Drops the casts a type refinement left where the type is already known (DenseNet's layer takes
// a Tensor or a list of them): each is an alias that would keep a list from being rebuilt.
void drop_redundant_casts(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* node = *it++;
    for (torch::jit::Block* inner : node->blocks()) drop_redundant_casts(inner);
    if (node->kind() == c10::prim::unchecked_cast && node->input()->type()->isSubtypeOf(*node->output()->type())) {
      node->output()->replaceAllUsesWith(node->input());
      node->destroy();
    }
  }
}

// A write into a list that unrolling can follow: an append, or an assignment at an index known
// when the forward is read (a loop over a ModuleList unrolled: HRNet's `x[i] = branch(x[i])`),
// in the list's own block, whose result nothing uses.
bool followable_write(const torch::jit::Use& use, const Node* construct) {
  const Node* user = use.user;
  const bool append = user->kind() == c10::aten::append;
  if (!append && user->kind() != c10::aten::_set_item) return false;  // (an unpacking has several outputs)
  if (use.offset != 0 || user->owningBlock() != construct->owningBlock() || user->output()->hasUses()) return false;
  return append || torch::jit::toIValue(user->input(1)).has_value();
}

// The index an assignment writes, in [0, length); nullopt where it is outside.
std::optional<int64_t> set_index(const Node* set, size_t length) {
  int64_t index = torch::jit::toIValue(set->input(1))->toInt();
  if (index < 0) index += static_cast<int64_t>(length);
  if (index < 0 || index >= static_cast<int64_t>(length)) return std::nullopt;
  return index;
}

// Whether a list made by `construct` is only read (into a list of its own at most, as `a + b`
// makes) and written only where unrolling can follow.
bool writes_followable(const Node* construct) {
  std::vector<const Node*> writes;
  for (const torch::jit::Use& use : construct->output()->uses()) {
    if (reads_list_only(use)) continue;
    if (!followable_write(use, construct)) return false;
    writes.push_back(use.user);
  }
  std::sort(writes.begin(), writes.end(), [](const Node* a, const Node* b) { return a->isBefore(b); });
  size_t length = construct->inputs().size();
  for (const Node* write : writes) {
    if (write->kind() == c10::aten::append) {
      ++length;
    } else if (!set_index(write, length)) {
      return false;
    }
  }
  return true;
}

// A list of tensors grown by appends (DenseNet's `features.append(new_features)`) or assigned
// into becomes one list construction per state, each read reading the state it sees, so that a
// piece can build the list it reads from the tensors it receives.
void unroll_list_writes(torch::jit::Block* block) {
  for (Node* node : block->nodes()) {
    if (node->kind() != c10::prim::ListConstruct || !writes_followable(node)) continue;
    Value* current = node->output();
    for (Node* next = node->next(); next != block->return_node(); next = next->next()) {
      const bool append = next->kind() == c10::aten::append;
      if ((!append && next->kind() != c10::aten::_set_item) || next->input(0) != current) continue;
      std::vector<Value*> elements(current->node()->inputs().begin(), current->node()->inputs().end());
      if (append) {
        elements.push_back(next->input(1));
      } else {
        elements[static_cast<size_t>(*set_index(next, elements.size()))] = next->input(2);
      }
      const auto element_type = current->type()->expectRef<c10::ListType>().getElementType();
      Node* state = block->owningGraph()->createList(element_type, elements)->insertAfter(next);
      const std::vector<torch::jit::Use> uses = current->uses();
      for (const torch::jit::Use& use : uses) {
        if (use.user != next && !use.user->isBefore(next)) use.user->replaceInput(use.offset, state->output());
      }
      next->destroy();
      current = state->output();
      next = state;
    }
  }
}

// A module picked from a ModuleList or ModuleDict by an index that folding made a constant
// (`self.blocks[i + 1]` in a loop over another list, as HRNet's head does) becomes that module
// itself, so that its call is inlined and cut as a direct call is. Returns whether any was.
bool pick_indexed_modules(torch::jit::Block* block, const torch::jit::Module& script, const Value* self) {
  bool picked = false;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* node = *it++;
    for (torch::jit::Block* inner : node->blocks()) picked |= pick_indexed_modules(inner, script, self);
    if (node->kind() != c10::prim::ModuleContainerIndex) continue;
    const auto path = attribute_path(node->input(0), self);
    const auto index = torch::jit::toIValue(node->input(1));
    if (!path || !index || !(index->isInt() || index->isString())) continue;
    const torch::jit::Module container = submodule(script, *path);
    std::string name;
    if (index->isInt()) {
      const int64_t count = static_cast<int64_t>(container.named_children().size());
      const int64_t i = index->toInt() < 0 ? index->toInt() + count : index->toInt();
      if (i < 0 || i >= count) continue;  // the forward's own IndexError, when it runs
      name = std::to_string(i);
    } else {
      name = index->toStringRef();
    }
    if (!container.hasattr(name)) continue;
    torch::jit::WithInsertPoint here(node);
    node->output()->replaceAllUsesWith(block->owningGraph()->insertGetAttr(node->input(0), name));
    node->destroy();
    picked = true;
  }
  return picked;
}

// The forward's graph as the cutter reads it: every call but those of weight layers inlined,
// settings folded (with the code they rule out), every random draw from the unit generator.
std::shared_ptr<Graph> cuttable_forward(const torch::jit::Module& script, const std::string& file) {
  auto graph = script.get_method("forward").graph()->copy();
  Value* self = graph->inputs()[0];
  do {  // until no container is indexed by a number that folding made known
    inline_calls(graph->block(), file);
    std::set<std::string> assigned;
    assigned_attributes(graph->block(), self, assigned);
    fold_settings(graph->block(), script, self, assigned);
    fold_none_checks(graph->block());
    try {
      // A tuple an inlined call returns and its caller unpacks is its elements: a feature map's
      // (H, W), or an optional tensor a setting made None, crosses as what it is.
      torch::jit::LowerSimpleTuples(graph);
      torch::jit::ConstantPropagation(graph);
      torch::jit::EliminateDeadCode(graph);
    } catch (const c10::Error& e) {
      throw UsageError(c10::str(file, ": the forward's constants cannot be folded: ", e.what_without_backtrace()));
    }
  } while (pick_indexed_modules(graph->block(), script, self));
  // Once the settings' branches are gone, a list's writes are in the forward's own block.
  drop_redundant_casts(graph->block());
  unroll_list_writes(graph->block());
  torch::jit::EliminateDeadCode(graph);
  make_draws_exact(*graph, file);
  return graph;
}

struct Piece {
  std::vector<Node*> nodes;  // top-level nodes, in order (recomputable ones left out)
  int weight_layers = 0;
  std::string first_layer;  // the path of the first weight layer it calls
  Value* main_in = nullptr;
  Value* main_out = nullptr;
  std::vector<std::pair<std::string, Value*>> pops, stashes;  // by skip name
  std::string joined;  // why it holds pieces that could have been cut apart; empty: none
};

bool is_tensor_list(const c10::TypePtr& type) {
  const auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::TensorType;
}

// A list of ints (a feature map's size handed on with it, as MViTv2's stages do): it crosses a
// register as a tensor of one dimension, whatever its length.
bool is_int_list(const c10::TypePtr& type) {
  const auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::IntType;
}

// The lengths of the lists of tensors that the forward's own block gets from operators (split,
// chunk, unbind: lengths that shapes decide), from two runs of a copy of the network in
// evaluation mode on samples of `input`'s shape, 2 and 3 of them: a list whose length is the
// same in both may cross a register as its tensors. Empty where the runs fail (the lists then
// keep their pieces together).
std::map<const Value*, size_t> list_lengths(const torch::jit::Module& script, Graph& whole, const InputShape& input) {
  std::vector<Value*> lists;
  for (Node* node : whole.nodes()) {
    // Not a list a branch or loop picks, whose length may change with the data.
    if (!node->maybeSchema() || !node->blocks().empty() || node->outputs().size() != 1) continue;
    if (is_tensor_list(node->output()->type()) && only_read(node->output())) lists.push_back(node->output());
  }
  if (lists.empty()) return {};
  auto probe = std::make_shared<Graph>();
  std::map<Value*, Value*> map;
  map[whole.inputs()[0]] = probe->addInput()->copyMetadata(whole.inputs()[0]);
  map[whole.inputs()[1]] = probe->addInput("x");
  for (Node* node : whole.nodes()) {
    Node* copy = probe->insertNode(probe->createClone(node, [&](Value* v) { return map.at(v); }));
    for (size_t i = 0; i < node->outputs().size(); ++i) map[node->output(i)] = copy->output(i);
  }
  std::vector<Value*> lengths;
  for (Value* list : lists) lengths.push_back(probe->insert(c10::aten::len, {map.at(list)}));
  probe->registerOutput(probe->insertNode(probe->createTuple(lengths))->output());
  torch::jit::GraphFunction run("probe", probe, nullptr);
  std::vector<std::vector<c10::IValue>> seen;
  try {
    torch::jit::Module copy = script.deepcopy();
    copy.eval();
    torch::NoGradGuard no_grad;
    for (int64_t samples : {2, 3}) {
      seen.push_back(run({copy._ivalue(), torch::zeros({samples, input.channels, input.height, input.width})})
                         .toTupleRef().elements().vec());
    }
  } catch (const std::exception&) {
    return {};
  }
  std::map<const Value*, size_t> out;
  for (size_t i = 0; i < lists.size(); ++i) {
    if (seen[0][i].toInt() == seen[1][i].toInt()) out[lists[i]] = static_cast<size_t>(seen[0][i].toInt());
  }
  return out;
}

class Segmenter {
 public:
  // `measure_lists`: list_lengths, run only when a list of tensors would cross a register.
  Segmenter(const torch::jit::Module& script, std::shared_ptr<Graph> graph, std::string file,
            std::function<std::map<const Value*, size_t>()> measure_lists)
      : script_(script), graph_(std::move(graph)), file_(std::move(file)), measure_lists_(std::move(measure_lists)) {
    self_ = graph_->inputs()[0];
    std::set<std::string> assigned;
    assigned_attributes(graph_->block(), self_, assigned);
    assigns_attributes_ = !assigned.empty();
    SP_CHECK_ARG(graph_->inputs().size() == 2, file_, ": forward takes ", graph_->inputs().size() - 1,
                 " inputs; a network stalepipe trains takes one tensor");
    SP_CHECK_ARG(graph_->outputs().size() == 1 && graph_->outputs()[0]->type()->kind() == c10::TypeKind::TensorType,
                 file_, ": forward returns ", graph_->outputs()[0]->type()->str(), "; it must return one tensor");
  }

  // How many tensors `v` crosses a register as: 1 for a tensor, a number or bool (as a tensor of
  // no dimensions) or a list of ints (of one), a list's length for a list of tensors of a known
  // length; 0 for what cannot.
  size_t tensors_crossing(const Value* v) const {
    const auto kind = v->type()->kind();
    if (kind == c10::TypeKind::TensorType || kind == c10::TypeKind::IntType || kind == c10::TypeKind::FloatType ||
        kind == c10::TypeKind::BoolType || is_int_list(v->type())) {
      return 1;
    }
    if (!is_tensor_list(v->type())) return 0;
    if (!list_lengths_) list_lengths_ = measure_lists_();
    const auto length = list_lengths_->find(v);
    return length == list_lengths_->end() ? 0 : length->second;
  }

  std::vector<Piece> cut() {
    split_at_weight_layers();
    merge_pieces_the_next_does_not_continue();
    merge_where_other_values_cross();
    route_values();
    return pieces_;
  }

  // Makes pieces [first, last] one, for `why`, and routes the values anew.
  std::vector<Piece> join(size_t first, size_t last, const std::string& why) {
    merge(first, last, why);
    route_values();
    return pieces_;
  }

 private:
  // Whether a value is computed from the module alone, again by each piece that reads it.
  bool from_module(const Node* node) const {
    return node->outputs().size() == 1 &&
           (recomputable(node->output(), self_) ||
            (derived_from_module(node, self_) && !written_in_place(node->output())));
  }

  // A node that reads only what every piece computes again (a check on a weight's shape, as
  // F.batch_norm makes of a standardised weight): it may run later, with the next node that
  // reads the input, so that a weight and its checks stay in its layer's piece. Not where the
  // forward assigns attributes or writes what the node reads.
  bool deferrable(Node* node) const {
    if (assigns_attributes_) return false;
    std::vector<Value*> in;
    outside_inputs(node, node, in);
    return std::all_of(in.begin(), in.end(), [&](Value* v) {
      return (module_values_.count(v) || recomputable(v, self_)) && !written_in_place(v);
    });
  }

  void split_at_weight_layers() {
    pieces_.emplace_back();
    std::vector<Node*> deferred;
    for (Node* node : graph_->nodes()) {
      if (from_module(node)) {
        module_values_.insert(node->output());
        continue;
      }
      if (node->outputs().size() == 1 && rebuildable(node->output())) continue;
      if (deferrable(node)) {
        deferred.push_back(node);
        for (Value* out : node->outputs()) module_values_.insert(out);
        continue;
      }
      std::vector<const Node*> layers;
      weight_calls(node, layers);
      std::string container;
      const int count = static_cast<int>(layers.size()) + container_layers(node, container);
      if (count > 0 && pieces_.back().weight_layers > 0) pieces_.emplace_back();
      deferred.push_back(node);
      place(deferred);
      if (count > 0 && pieces_.back().weight_layers == 0) {
        pieces_.back().first_layer = layers.empty() ? container : layer_path(layers.front(), self_);
      }
      // Layers inside a branch or loop that only the running forward decides (a window
      // attention taken as it is or padded first, by the input's size) run in one piece.
      if (count > 1 && pieces_.back().joined.empty()) {
        const char* why = container.empty() ? " holds them: a branch or loop decided as it runs"
                                            : " picks them by an index known as it runs";
        pieces_.back().joined = c10::str(script_node_place(*node), why);
      }
      pieces_.back().weight_layers += count;
    }
    place(deferred);  // checks after the last node that reads the input
  }

  // `nodes`, in order, into the last piece; empties it.
  void place(std::vector<Node*>& nodes) {
    for (Node* n : nodes) {
      pieces_.back().nodes.push_back(n);
      for (Value* out : n->outputs()) piece_of_[out] = static_cast<int>(pieces_.size()) - 1;
    }
    nodes.clear();
  }

  // The weight layers of the module containers a node (and the blocks in it) indexes with a
  // number known only when it runs (prim::ModuleContainerIndex): all of a container's count,
  // once. `first`: the path of the first such container.
  int container_layers(const Node* node, std::string& first) {
    int count = 0;
    if (node->kind() == c10::prim::ModuleContainerIndex) {
      const auto path = attribute_path(node->input(0), self_);
      if (path && counted_containers_.insert(*path).second) {
        count += count_script_weight_layers(submodule(script_, *path));
        if (first.empty()) first = *path;
      }
    }
    for (const torch::jit::Block* block : node->blocks()) {
      for (const Node* inner : block->nodes()) count += container_layers(inner, first);
    }
    return count;
  }

  int producer(Value* v) const {
    if (v == graph_->inputs()[1]) return -1;
    const auto it = piece_of_.find(v);
    return it == piece_of_.end() ? -2 : it->second;  // -2: recomputable
  }

  // A tuple, or a list that nothing writes into: a piece that reads it builds it again from its
  // elements, which are what crosses the registers.
  bool rebuildable(const Value* v) const {
    const auto kind = v->node()->kind();
    return kind == c10::prim::TupleConstruct || (kind == c10::prim::ListConstruct && only_read(v));
  }

  void add_read(Value* v, std::vector<Value*>& out) const {
    if (!rebuildable(v) || recomputable(v, self_)) {
      out.push_back(v);
      return;
    }
    for (Value* element : v->node()->inputs()) add_read(element, out);
  }

  // The values piece p reads from earlier pieces (or the input), in the order it first reads them.
  std::vector<Value*> reads(size_t p) const {
    std::vector<Value*> direct, all, out;
    for (Node* node : pieces_[p].nodes) outside_inputs(node, node, direct);
    if (p + 1 == pieces_.size()) direct.push_back(graph_->outputs()[0]);
    for (Value* v : direct) add_read(v, all);
    for (Value* v : all) {
      const int from = producer(v);
      if (from != -2 && from < static_cast<int>(p) && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    return out;
  }

  // Pieces [first, last] into `first`; `why` (if any) says why they could not stay apart.
  void merge(size_t first, size_t last, const std::string& why) {
    Piece& into = pieces_[first];
    if (into.joined.empty()) into.joined = why;
    for (size_t p = first + 1; p <= last; ++p) {
      into.nodes.insert(into.nodes.end(), pieces_[p].nodes.begin(), pieces_[p].nodes.end());
      into.weight_layers += pieces_[p].weight_layers;
      if (into.first_layer.empty()) into.first_layer = pieces_[p].first_layer;
      if (into.joined.empty()) into.joined = pieces_[p].joined;
    }
    const int gone = static_cast<int>(last - first);
    for (auto& [value, piece] : piece_of_) {
      if (piece > static_cast<int>(last)) {
        piece -= gone;
      } else if (piece > static_cast<int>(first)) {
        piece = static_cast<int>(first);
      }
    }
    pieces_.erase(pieces_.begin() + static_cast<std::ptrdiff_t>(first + 1),
                  pieces_.begin() + static_cast<std::ptrdiff_t>(last + 1));
  }

  // A register can only go where the next piece continues from this one: elsewhere the two
  // are one unit.
  // A piece continues from the tensor it reads from the piece before it or, where it reads none
  // (a shortcut's projection beside the convolution on the same input), from an earlier tensor
  // that the piece before hands on to it (main_of).
  void merge_pieces_the_next_does_not_continue() {
    for (size_t p = 1; p < pieces_.size();) {
      if (main_of(p, reads(p))) {
        ++p;
        continue;
      }
      merge(p - 1, p, "the layers after it read no tensor of the layers before it");
    }
  }

  // The tensor piece p continues from: the first it reads (`in`, reads(p)) of piece p - 1's,
  // else the first it reads of an earlier piece's (or the network's input).
  Value* main_of(size_t p, const std::vector<Value*>& in) const {
    Value* earlier = nullptr;
    for (Value* v : in) {
      if (v->type()->kind() != c10::TypeKind::TensorType) continue;
      if (producer(v) == static_cast<int>(p) - 1) return v;
      if (!earlier) earlier = v;
    }
    return earlier;
  }

  // Only tensors cross a register, and what becomes tensors there (numbers, bools, lists of ints,
  // lists of tensors of a known length): a piece that reads anything else from an earlier piece (a list
  // whose length changes with the batch, a module picked from a list by a number known only
  // when the forward runs) is one unit with every piece from that one on.
  void merge_where_other_values_cross() {
    for (size_t p = 1; p < pieces_.size();) {
      int first = -1;
      const Value* why = nullptr;
      for (Value* v : reads(p)) {
        const int from = producer(v);
        if (from < 0 || tensors_crossing(v) > 0) continue;
        if (first < 0 || from < first) {
          first = from;
          why = v;
        }
      }
      if (first < 0) {
        ++p;
        continue;
      }
      merge(static_cast<size_t>(first), p,
            c10::str(script_node_place(*why->node()), " makes a ", why->type()->str(), " that a later layer uses"));
      p = static_cast<size_t>(first) + 1;
    }
  }

  // A value read by several later pieces goes from each reader to the next (a relay), so that
  // it crosses each register once and its gradients add up in the order autograd adds them in
  // the whole forward: later readers' first.
  void route_values() {
    skips_ = 0;
    for (Piece& piece : pieces_) {
      piece.main_in = piece.main_out = nullptr;
      piece.pops.clear();
      piece.stashes.clear();
    }
    pieces_[0].main_in = graph_->inputs()[1];
    std::map<Value*, int> holder;  // the last piece that received a value: it hands it on
    holder[graph_->inputs()[1]] = 0;
    // From the piece that holds `v` to piece `to`, as a skip tensor.
    auto hand = [&](Value* v, size_t to) {
      const auto held = holder.find(v);
      const int giver = held == holder.end() ? producer(v) : held->second;
      const std::string name = flat_name(c10::str("s", skips_++, "_", v->debugName()));
      pieces_[giver].stashes.emplace_back(name, v);
      pieces_[to].pops.emplace_back(name, v);
      holder[v] = static_cast<int>(to);
    };
    for (size_t p = 0; p < pieces_.size(); ++p) {
      const std::vector<Value*> in = reads(p);
      if (p > 0) {
        Value* main = main_of(p, in);
        // An earlier tensor passes through piece p - 1 as its output.
        const auto held = holder.find(main);
        if ((held == holder.end() ? producer(main) : held->second) != static_cast<int>(p) - 1) hand(main, p - 1);
        pieces_[p].main_in = pieces_[p - 1].main_out = main;
        holder[main] = static_cast<int>(p);
      }
      for (Value* v : in) {
        SP_CHECK(tensors_crossing(v) > 0, file_, ": ", script_node_place(*v->node()), " makes a ", v->type()->str(),
                 " that crosses between pieces");  // merged: never
        if (v != pieces_[p].main_in) hand(v, p);
      }
    }
    pieces_.back().main_out = graph_->outputs()[0];
  }

  torch::jit::Module script_;
  std::shared_ptr<Graph> graph_;
  std::string file_;
  std::set<std::string> counted_containers_;
  bool assigns_attributes_ = false;
  std::set<const Value*> module_values_;  // computed from the module alone (split_at_weight_layers)
  Value* self_ = nullptr;
  std::function<std::map<const Value*, size_t>()> measure_lists_;
  mutable std::optional<std::map<const Value*, size_t>> list_lengths_;
  std::vector<Piece> pieces_;
  std::map<Value*, int> piece_of_;
  int skips_ = 0;
};

bool holds_tensor(const c10::TypePtr& type) {
  if (const auto optional = type->cast<c10::OptionalType>()) return holds_tensor(optional->getElementType());
  return type->kind() == c10::TypeKind::TensorType;
}

// Whether an operation writes into `v` (a dict's `d[k] = t`).
bool written_through(const Value* v) {
  const auto uses = v->uses();
  return std::any_of(uses.begin(), uses.end(), [](const torch::jit::Use& use) {
    const c10::FunctionSchema* schema = use.user->maybeSchema();
    if (!schema || use.offset >= schema->arguments().size()) return false;
    const c10::AliasInfo* alias = schema->arguments()[use.offset].alias_info();
    return alias && alias->isWrite();
  });
}

// What the nodes of `block` and the blocks nested in them use of the module `self`.
void collect_uses(const torch::jit::Block* block, const Value* self, PieceUses& uses) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::CallMethod && module_type(node->input(0))) {
      uses.calls.insert(module_path(node->input(0), self));
    }
    // A module picked from a container by a number known only when it runs: any of them.
    if (node->kind() == c10::prim::ModuleContainerIndex && attribute_path(node->input(0), self)) {
      uses.calls.insert(module_path(node->input(0), self));
    }
    if (node->kind() == c10::prim::GetAttr && module_type(node->input(0))) {
      const std::string path = module_path(node->output(), self);
      if (node->s(c10::attr::name) == "training") uses.flags.insert(module_path(node->input(0), self));
      if (holds_tensor(node->output()->type())) uses.tensors.insert(path);
      if (is_tensor_list(node->output()->type())) uses.tensor_lists.insert(path);
      if (node->output()->type()->kind() == c10::TypeKind::DictType && written_through(node->output())) {
        uses.caches.insert(path);
      }
    }
    for (const torch::jit::Block* inner : node->blocks()) collect_uses(inner, self, uses);
  }
}

struct ScriptTensor {
  std::string path;  // "layer1.0.bn1.weight"
  torch::Tensor tensor;
  bool parameter = false;  // else a buffer
};

// An attribute's path as the path of the module that holds it ("" for the top) and its name.
std::pair<std::string, std::string> split_attribute_path(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

// The parameters and buffers a piece uses: those of the layers it calls and those it reads.
std::vector<ScriptTensor> piece_tensors(const torch::jit::Module& script, const PieceUses& uses) {
  std::vector<ScriptTensor> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& path, const torch::Tensor& t, bool parameter) {
    if (seen.insert(path).second) out.push_back({path, t, parameter});
  };
  for (const std::string& path : uses.calls) {
    const auto layer = submodule(script, path);
    const std::string prefix = path.empty() ? "" : path + ".";
    for (const auto& p : layer.named_parameters(/*recurse=*/true)) add(prefix + p.name, p.value, true);
    for (const auto& b : layer.named_buffers(/*recurse=*/true)) add(prefix + b.name, b.value, false);
  }
  for (const std::string& path : uses.tensors) {
    const auto [owner_path, name] = split_attribute_path(path);
    const auto owner = submodule(script, owner_path);
    const auto slot = owner.type()->findAttributeSlot(name);
    if (!slot || !owner._ivalue()->getSlot(*slot).isTensor()) continue;  // an optional tensor that is None
    add(path, owner._ivalue()->getSlot(*slot).toTensor(), owner.type()->is_parameter(*slot));
  }
  // A list attribute of its module's own tensors (nn.LSTM's _flat_weights, which aten::lstm
  // reads): those tensors, by the names the module gives them.
  for (const std::string& path : uses.tensor_lists) {
    const auto [owner_path, name] = split_attribute_path(path);
    const auto owner = submodule(script, owner_path);
    const std::string prefix = owner_path.empty() ? "" : owner_path + ".";
    const auto list = owner.attr(name);
    if (!list.isList()) continue;
    for (const c10::IValue& element : list.toListRef()) {
      if (!element.isTensor()) continue;
      for (const auto& p : owner.named_parameters(/*recurse=*/false)) {
        if (p.value.is_same(element.toTensor())) add(prefix + p.name, p.value, true);
      }
      for (const auto& b : owner.named_buffers(/*recurse=*/false)) {
        if (b.value.is_same(element.toTensor())) add(prefix + b.name, b.value, false);
      }
    }
  }
  return out;
}

// The names of the tensors `value` crosses a register as, under the skip name `name`: a list's
// elements get one each.
std::vector<std::string> crossing_names(const std::string& name, const Value* value, size_t count) {
  if (!is_tensor_list(value->type())) return {name};
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back(c10::str(name, "_", i));
  return names;
}

// A value a piece receives, from the tensors it crosses as (inputs of `graph`).
Value* receive(Graph& graph, const Value* value, const std::vector<std::string>& names) {
  std::vector<Value*> tensors;
  for (const std::string& name : names) tensors.push_back(graph.addInput(name));
  if (is_int_list(value->type())) {
    // tolist(tensor, dims, element type: 0 is int), as TorchScript makes `t.tolist()`.
    Node* list = graph.create(c10::prim::tolist, {tensors[0], graph.insertConstant(1), graph.insertConstant(0)});
    list->output()->copyMetadata(const_cast<Value*>(value));
    return graph.insertNode(list)->output();
  }
  switch (value->type()->kind()) {
    case c10::TypeKind::TensorType: return tensors[0];
    case c10::TypeKind::IntType: return graph.insert(c10::aten::Int, {tensors[0]});
    case c10::TypeKind::FloatType: return graph.insert(c10::aten::Float, {tensors[0]});
    case c10::TypeKind::BoolType: return graph.insert(c10::aten::Bool, {graph.insert(c10::aten::Int, {tensors[0]})});
    default: return graph.insertNode(graph.createList(c10::TensorType::get(), tensors))->output();
  }
}

// A value a piece hands on (`sent`, in `graph`), as the tensors it crosses a register as.
void send(Graph& graph, const Value* value, Value* sent, size_t count, std::vector<Value*>& out) {
  if (is_int_list(value->type())) {  // as int64, also where it is empty
    out.push_back(graph.insert(c10::aten::tensor, {sent}, {torch::jit::NamedValue("dtype", static_cast<int64_t>(c10::kLong))}));
    return;
  }
  switch (value->type()->kind()) {
    case c10::TypeKind::TensorType: out.push_back(sent); return;
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType: out.push_back(graph.insert(c10::prim::NumToTensor, {sent})); return;
    case c10::TypeKind::BoolType:  // as an integer: a tensor of bools crosses no process group
      out.push_back(graph.insert(c10::prim::NumToTensor, {graph.insert(c10::aten::Int, {sent})}));
      return;
    default:
      for (Value* element : graph.insertNode(graph.createListUnpack(sent, count))->outputs()) out.push_back(element);
  }
}

// The graph of one piece: (self, main, popped...) -> (output, stashed...), with what crosses
// registers as tensors (`count`: how many, Segmenter::tensors_crossing).
std::shared_ptr<Graph> piece_graph(Graph& whole, const Piece& piece, const std::function<size_t(const Value*)>& count) {
  auto graph = std::make_shared<Graph>();
  std::map<Value*, Value*> map;
  Value* self = whole.inputs()[0];
  // copyMetadata, not setType: an inline setType asks UBSan's vptr check for a typeinfo that
  // LibTorch does not export. Inputs are tensors unless typed otherwise.
  map[self] = graph->addInput()->copyMetadata(self);
  map[piece.main_in] = graph->addInput("x");
  for (const auto& [name, v] : piece.pops) map[v] = receive(*graph, v, crossing_names(name, v, count(v)));
  std::function<Value*(Value*)> value_of = [&](Value* v) -> Value* {
    if (const auto it = map.find(v); it != map.end()) return it->second;
    Node* copy = graph->insertNode(graph->createClone(v->node(), value_of));  // recomputable, or a list rebuilt
    for (size_t i = 0; i < copy->outputs().size(); ++i) map[v->node()->output(i)] = copy->output(i);
    return map.at(v);
  };
  for (Node* node : piece.nodes) {
    Node* copy = graph->insertNode(graph->createClone(node, value_of));
    for (size_t i = 0; i < node->outputs().size(); ++i) map[node->output(i)] = copy->output(i);
  }
  // A function returns one value: the tensors as a tuple.
  std::vector<Value*> outputs = {value_of(piece.main_out)};
  for (const auto& [name, v] : piece.stashes) send(*graph, v, value_of(v), count(v), outputs);
  graph->registerOutput(graph->insertNode(graph->createTuple(outputs))->output());
  return graph;
}

}  // namespace

ScriptSegmentImpl::ScriptSegmentImpl(torch::jit::Module script, std::shared_ptr<torch::jit::Graph> graph,
                                     const PieceUses& uses, const std::string& name)
    : torch::nn::Module("ScriptSegment"), script_(std::move(script)),
      function_(std::make_shared<torch::jit::GraphFunction>(name, graph, nullptr)),
      draws_(detail::draws_random_numbers(*graph)) {
  for (const std::string& path : uses.flags) flagged_.push_back(submodule(script_, path));
  for (const std::string& path : uses.calls) modules_.push_back(submodule(script_, path));
  for (const std::string& path : uses.caches) {
    const auto [owner_path, name] = split_attribute_path(path);
    caches_.emplace_back(submodule(script_, owner_path), name);
  }
  for (const ScriptTensor& t : piece_tensors(script_, uses)) {
    if (t.parameter) {
      register_parameter(flat_name(t.path), t.tensor, t.tensor.requires_grad());
    } else {
      register_buffer(flat_name(t.path), t.tensor);
    }
  }
  torch::jit::AliasDb aliases(graph);
  for (size_t i = 1; i < graph->inputs().size(); ++i) {
    if (aliases.hasWriters(graph->inputs()[i])) written_.push_back(i - 1);
  }
  torch::nn::Module::train(script_.is_training());
}

std::vector<torch::Tensor> ScriptSegmentImpl::forward(std::vector<torch::Tensor> inputs) {
  // A piece that writes into a tensor it was handed gets a copy (a register's leaf, a skip).
  for (size_t i : written_) inputs[i] = inputs[i].clone();
  shapes_.clear();
  numbers_.clear();
  for (const auto& t : inputs) {
    shapes_.push_back(t.sizes().vec());
    numbers_.push_back(t.dim() == 0 || !t.is_floating_point() ? t.detach().clone() : torch::Tensor());
  }
  torch::jit::Stack stack = {script_._ivalue()};
  for (auto& t : inputs) stack.emplace_back(std::move(t));
  try {
    function_->run(stack);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, script_error_cause(e));
  }
  std::vector<torch::Tensor> out;
  for (const auto& v : stack.front().toTupleRef().elements()) out.push_back(v.toTensor());
  return out;
}

void ScriptSegmentImpl::train(bool on) {
  torch::nn::Module::train(on);
  // Only the layers this piece calls, and the flags of the modules it reads them of: a
  // container's train() would switch other partitions' layers too.
  for (auto& m : modules_) m.train(on);
  for (auto& m : flagged_) m._ivalue()->setAttr("training", on);
  // A dict the forward fills (the attention-bias caches of timm's LeViT, TinyViT, EfficientViT,
  // filled in evaluation mode) holds values made from the weights as they were then. timm's
  // train() empties them in Python; scripted, that override never runs.
  for (auto& [owner, name] : caches_) owner._ivalue()->getAttr(name).toGenericDict().clear();
}

double ScriptSegmentImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  SP_CHECK(!shapes_.empty(), "scripted piece: FLOPs are counted after a forward has shown its inputs' shapes");
  std::vector<torch::Tensor> zeros;
  auto options = torch::TensorOptions(torch::kFloat);
  const auto params = parameters();
  if (!params.empty()) options = options.dtype(params.front().dtype()).device(params.front().device());
  // The inputs of the last forward, whose numbers (a batch size read from a shape, a list of
  // sizes) fit only its shapes; the main input at its leading size, as `input_shape` gives the rest.
  const int64_t batch = shapes_[0].empty() ? 1 : shapes_[0][0];
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (numbers_[i].defined()) {
      zeros.push_back(numbers_[i]);
      continue;
    }
    std::vector<int64_t> sizes = shapes_[i];
    if (i == 0) {
      sizes = {batch};
      sizes.insert(sizes.end(), input_shape.begin(), input_shape.end());
    }
    zeros.push_back(torch::zeros(sizes, options));
  }
  auto* self = const_cast<ScriptSegmentImpl*>(this);
  const auto shapes = shapes_;
  const auto numbers = numbers_;
  const double flops = profiled_flops([&] { self->forward(zeros); });
  self->shapes_ = shapes;
  self->numbers_ = numbers;
  return flops / static_cast<double>(batch);
}

namespace {

struct PieceGraph {
  std::shared_ptr<Graph> graph;
  PieceUses uses;
};

// Each piece's graph and what it uses; nullopt, after joining the first two pieces that read
// one parameter or buffer (a tensor two partitions would share trains in one).
std::optional<std::vector<PieceGraph>> piece_graphs(const torch::jit::Module& script, Graph& whole,
                                                    Segmenter& segmenter, std::vector<Piece>& pieces) {
  std::vector<PieceGraph> out;
  std::map<const void*, size_t> reader;  // TensorImpl -> the first piece that reads it
  for (size_t p = 0; p < pieces.size(); ++p) {
    PieceGraph piece{piece_graph(whole, pieces[p], [&](const Value* v) { return segmenter.tensors_crossing(v); }), {}};
    collect_uses(piece.graph->block(), piece.graph->inputs()[0], piece.uses);
    for (const ScriptTensor& t : piece_tensors(script, piece.uses)) {
      const auto [it, fresh] = reader.emplace(t.tensor.unsafeGetTensorImpl(), p);
      if (fresh || it->second == p) continue;
      pieces = segmenter.join(it->second, p,
                              c10::str(t.parameter ? "parameter " : "buffer ", t.path, " is read on both sides"));
      return std::nullopt;
    }
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace

std::vector<ScriptPiece> cut_script_forward(const torch::jit::Module& script, const std::string& file,
                                           const InputShape& input) {
  const auto graph = cuttable_forward(script, file);
  Segmenter segmenter(script, graph, file, [&] { return list_lengths(script, *graph, input); });
  std::vector<Piece> pieces = segmenter.cut();
  std::optional<std::vector<PieceGraph>> graphs;
  while (!(graphs = piece_graphs(script, *graph, segmenter, pieces))) {
  }
  std::vector<ScriptPiece> units;
  for (size_t p = 0; p < pieces.size(); ++p) {
    ScriptPiece unit;
    unit.name = pieces[p].first_layer.empty() ? c10::str("piece", p + 1) : flat_name(pieces[p].first_layer);
    unit.weight_layers = pieces[p].weight_layers;
    unit.joined = pieces[p].joined;
    for (const auto& [skip, v] : pieces[p].pops) {
      for (std::string& name : crossing_names(skip, v, segmenter.tensors_crossing(v))) unit.skips.pops.push_back(name);
    }
    for (const auto& [skip, v] : pieces[p].stashes) {
      for (std::string& name : crossing_names(skip, v, segmenter.tensors_crossing(v))) {
        unit.skips.stashes.push_back(name);
      }
    }
    const PieceGraph& piece = (*graphs)[p];
    unit.module = unit.skips.empty() ? torch::nn::AnyModule(ScriptChainSegment(script, piece.graph, piece.uses, unit.name))
                                     : torch::nn::AnyModule(ScriptSegment(script, piece.graph, piece.uses, unit.name));
    units.push_back(std::move(unit));
  }
  return units;
}

}  // namespace stalepipe::models::detail
