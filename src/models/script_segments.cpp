// A scripted module whose forward is not its children in order (residual adds, concatenations,
// torch.flatten, blocks inside blocks) as units: the forward's graph, with every call of a
// module that holds modules inlined, is cut before each weight layer; each piece runs as a
// graph of its own, and every tensor one piece hands to a piece other than the next becomes a
// skip tensor (models/skips.h).
#include <algorithm>
#include <map>
#include <set>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/alias_analysis.h>

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

bool holds_modules(const c10::ClassType& type) {
  for (size_t i = 0; i < type.numAttributes(); ++i) {
    if (type.getAttribute(i)->cast<c10::ClassType>() && type.getAttribute(i)->expect<c10::ClassType>()->is_module()) {
      return true;
    }
  }
  return false;
}

// The called function of a top-level call that must be inlined: a method of a module that holds
// modules (a container or a block of the user's), or a free function; null otherwise.
torch::jit::GraphFunction* inlinable_callee(Node* node) {
  if (node->kind() == c10::prim::CallFunction) {
    const auto type = node->input(0)->type()->cast<c10::FunctionType>();
    return type ? torch::jit::tryToGraphFunction(*type->function()) : nullptr;
  }
  if (node->kind() != c10::prim::CallMethod) return nullptr;
  const auto type = module_type(node->input(0));
  if (!type || !holds_modules(*type)) return nullptr;
  return torch::jit::tryToGraphFunction(type->getMethod(node->s(c10::attr::name)));
}

// Inlines the forward's top-level calls until only leaf layers (modules without modules) are
// called there; calls inside branches and loops stay as they are (they stay inside one unit).
void inline_containers(Graph& graph) {
  for (bool again = true; again;) {
    again = false;
    for (Node* node : graph.nodes()) {
      if (auto* callee = inlinable_callee(node)) {
        torch::jit::inlineCallTo(node, callee, callee->graph().get());  // not the optimized graph: it inlines every layer
        again = true;
        break;
      }
    }
  }
}

// Values every piece may compute again instead of receiving: constants, and attributes read
// from the module (submodules, parameters, flags), and lists of those.
bool recomputable(const Value* v, const Value* self) {
  if (v == self) return true;
  const Node* node = v->node();
  if (node->kind() == c10::prim::Constant) return true;
  if (node->kind() == c10::prim::GetAttr) return recomputable(node->input(0), self);
  if (node->kind() == c10::prim::ListConstruct || node->kind() == c10::prim::TupleConstruct) {
    return std::all_of(node->inputs().begin(), node->inputs().end(),
                       [&](const Value* in) { return recomputable(in, self); });
  }
  return false;
}

// "layer1.0.conv1": the attribute path of a module-typed value from self ("" for self).
std::string module_path(const Value* v, const Value* self) {
  if (v == self) return "";
  const std::string outer = module_path(v->node()->input(0), self);
  return (outer.empty() ? "" : outer + ".") + v->node()->s(c10::attr::name);
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

bool is_weight_call(const Node* node) {
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

// The submodule of `root` at `path` ("layer1.0.conv1"; "" is root itself).
torch::jit::Module submodule(torch::jit::Module root, const std::string& path) {
  for (size_t begin = 0; begin < path.size();) {
    const size_t end = std::min(path.find('.', begin), path.size());
    root = root.attr(path.substr(begin, end - begin)).toModule();
    begin = end + 1;
  }
  return root;
}

// Where a node sits in the source, for messages: "model.py:31" or its kind.
std::string where(const Node* node) {
  std::string text = node->kind().toQualString();
  if (const auto range = node->sourceRange().file_line_col()) {
    const auto& [file, line, col] = *range;
    text += c10::str(" at ", file, ":", line);
  }
  return text;
}

struct Piece {
  std::vector<Node*> nodes;  // top-level nodes, in order (recomputable ones left out)
  int weight_layers = 0;
  std::string first_layer;  // the path of the first weight layer it calls
  Value* main_in = nullptr;
  Value* main_out = nullptr;
  std::vector<std::pair<std::string, Value*>> pops, stashes;  // by skip name
};

class Segmenter {
 public:
  Segmenter(std::shared_ptr<Graph> graph, std::string file) : graph_(std::move(graph)), file_(std::move(file)) {
    self_ = graph_->inputs()[0];
    SP_CHECK_ARG(graph_->inputs().size() == 2, file_, ": forward takes ", graph_->inputs().size() - 1,
                 " inputs; a network stalepipe trains takes one tensor");
    SP_CHECK_ARG(graph_->outputs().size() == 1 && graph_->outputs()[0]->type()->kind() == c10::TypeKind::TensorType,
                 file_, ": forward returns ", graph_->outputs()[0]->type()->str(), "; it must return one tensor");
  }

  std::vector<Piece> cut() {
    split_at_weight_layers();
    merge_pieces_the_next_does_not_continue();
    route_values();
    return std::move(pieces_);
  }

 private:
  void split_at_weight_layers() {
    pieces_.emplace_back();
    for (Node* node : graph_->nodes()) {
      if (node->outputs().size() == 1 && recomputable(node->output(), self_)) continue;
      const bool weight = is_weight_call(node);
      if (weight && pieces_.back().weight_layers > 0) pieces_.emplace_back();
      pieces_.back().nodes.push_back(node);
      if (weight && pieces_.back().weight_layers++ == 0) pieces_.back().first_layer = module_path(node->input(0), self_);
      for (Value* out : node->outputs()) piece_of_[out] = static_cast<int>(pieces_.size()) - 1;
    }
  }

  int producer(Value* v) const {
    if (v == graph_->inputs()[1]) return -1;
    const auto it = piece_of_.find(v);
    return it == piece_of_.end() ? -2 : it->second;  // -2: recomputable
  }

  // The values piece p reads from earlier pieces (or the input), in the order it first reads them.
  std::vector<Value*> reads(size_t p) const {
    std::vector<Value*> all, out;
    for (Node* node : pieces_[p].nodes) outside_inputs(node, node, all);
    if (p + 1 == pieces_.size()) all.push_back(graph_->outputs()[0]);
    for (Value* v : all) {
      const int from = producer(v);
      if (from != -2 && from < static_cast<int>(p) && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    return out;
  }

  // A register can only go where the next piece continues from this one: elsewhere the two
  // are one unit.
  void merge_pieces_the_next_does_not_continue() {
    for (size_t p = 1; p < pieces_.size();) {
      const auto in = reads(p);
      const bool continues = std::any_of(in.begin(), in.end(), [&](Value* v) { return producer(v) == static_cast<int>(p) - 1; });
      if (continues) {
        ++p;
        continue;
      }
      auto& previous = pieces_[p - 1];
      previous.nodes.insert(previous.nodes.end(), pieces_[p].nodes.begin(), pieces_[p].nodes.end());
      previous.weight_layers += pieces_[p].weight_layers;
      for (Node* node : pieces_[p].nodes) {
        for (Value* out : node->outputs()) piece_of_[out] = static_cast<int>(p) - 1;
      }
      pieces_.erase(pieces_.begin() + static_cast<std::ptrdiff_t>(p));
      for (auto& [value, piece] : piece_of_) piece -= piece > static_cast<int>(p) ? 1 : 0;
    }
  }

  void route_values() {
    pieces_[0].main_in = graph_->inputs()[1];
    for (size_t p = 0; p < pieces_.size(); ++p) {
      for (Value* v : reads(p)) {
        const int from = producer(v);
        SP_CHECK_ARG(v->type()->kind() == c10::TypeKind::TensorType, file_, ": ", where(v->node()),
                     " makes a ", v->type()->str(), " that the forward uses after a place where a pipeline register "
                     "may go; only tensors can cross a register (compute it where it is used)");
        if (p > 0 && !pieces_[p].main_in && from == static_cast<int>(p) - 1) {
          pieces_[p].main_in = v;
          pieces_[p - 1].main_out = v;
          continue;
        }
        if (v == pieces_[p].main_in) continue;
        const std::string name = flat_name(c10::str("s", skips_++, "_", v->debugName()));
        pieces_[std::max(from, 0)].stashes.emplace_back(name, v);
        pieces_[p].pops.emplace_back(name, v);
      }
    }
    pieces_.back().main_out = graph_->outputs()[0];
  }

  std::shared_ptr<Graph> graph_;
  std::string file_;
  Value* self_ = nullptr;
  std::vector<Piece> pieces_;
  std::map<Value*, int> piece_of_;
  int skips_ = 0;
};

// The modules whose `training` flag a node or the nodes nested in it read.
void read_flags(const Node* node, const Value* self, std::set<std::string>& flags) {
  if (node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == "training" && module_type(node->input(0))) {
    flags.insert(module_path(node->input(0), self));
  }
  for (const torch::jit::Block* block : node->blocks()) {
    for (const Node* inner : block->nodes()) read_flags(inner, self, flags);
  }
}

// The graph of one piece: (self, main, popped...) -> (output, stashed...); `calls` gets the
// paths of the layers it calls, `flags` those of the modules whose training flag it reads.
std::shared_ptr<Graph> piece_graph(Graph& whole, const Piece& piece, std::set<std::string>& calls,
                                   std::set<std::string>& flags) {
  auto graph = std::make_shared<Graph>();
  std::map<Value*, Value*> map;
  Value* self = whole.inputs()[0];
  // copyMetadata, not setType: an inline setType asks UBSan's vptr check for a typeinfo that
  // LibTorch does not export. Inputs are tensors unless typed otherwise.
  map[self] = graph->addInput()->copyMetadata(self);
  map[piece.main_in] = graph->addInput("x");
  for (const auto& [name, v] : piece.pops) map[v] = graph->addInput(name);
  std::function<Value*(Value*)> value_of = [&](Value* v) -> Value* {
    if (const auto it = map.find(v); it != map.end()) return it->second;
    Node* copy = graph->insertNode(graph->createClone(v->node(), value_of));  // a recomputable value
    for (size_t i = 0; i < copy->outputs().size(); ++i) map[v->node()->output(i)] = copy->output(i);
    return map.at(v);
  };
  for (Node* node : piece.nodes) {
    Node* copy = graph->insertNode(graph->createClone(node, value_of));
    for (size_t i = 0; i < node->outputs().size(); ++i) map[node->output(i)] = copy->output(i);
    if (node->kind() == c10::prim::CallMethod && module_type(node->input(0))) {
      calls.insert(module_path(node->input(0), self));
    }
    read_flags(node, self, flags);
  }
  for (const auto& [original, copy] : map) {
    if (original->node()->kind() == c10::prim::GetAttr) read_flags(original->node(), self, flags);
  }
  // A function returns one value: the tensors as a tuple.
  std::vector<Value*> outputs = {value_of(piece.main_out)};
  for (const auto& [name, v] : piece.stashes) outputs.push_back(value_of(v));
  graph->registerOutput(graph->insertNode(graph->createTuple(outputs))->output());
  return graph;
}

}  // namespace

ScriptSegmentImpl::ScriptSegmentImpl(torch::jit::Module script, std::shared_ptr<torch::jit::Graph> graph,
                                     const std::set<std::string>& called, const std::set<std::string>& flags,
                                     const std::string& name)
    : torch::nn::Module("ScriptSegment"), script_(std::move(script)),
      function_(std::make_shared<torch::jit::GraphFunction>(name, graph, nullptr)) {
  for (const std::string& path : flags) flagged_.push_back(submodule(script_, path));
  for (const std::string& path : called) {
    modules_.push_back(submodule(script_, path));
    const std::string prefix = path.empty() ? "" : path + ".";
    for (const auto& p : modules_.back().named_parameters(/*recurse=*/true)) {
      register_parameter(flat_name(prefix + p.name), p.value, p.value.requires_grad());
    }
    for (const auto& b : modules_.back().named_buffers(/*recurse=*/true)) register_buffer(flat_name(prefix + b.name), b.value);
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
  for (const auto& t : inputs) shapes_.push_back(t.sizes().vec());
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
}

double ScriptSegmentImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  SP_CHECK(!shapes_.empty(), "scripted piece: FLOPs are counted after a forward has shown its inputs' shapes");
  std::vector<torch::Tensor> zeros;
  auto options = torch::TensorOptions(torch::kFloat);
  const auto params = parameters();
  if (!params.empty()) options = options.dtype(params.front().dtype()).device(params.front().device());
  for (size_t i = 0; i < shapes_.size(); ++i) {
    std::vector<int64_t> sizes = {1};
    const auto& sample = i == 0 ? input_shape : std::vector<int64_t>(shapes_[i].begin() + 1, shapes_[i].end());
    sizes.insert(sizes.end(), sample.begin(), sample.end());
    zeros.push_back(torch::zeros(sizes, options));
  }
  auto* self = const_cast<ScriptSegmentImpl*>(this);
  const auto shapes = shapes_;
  const double flops = profiled_flops([&] { self->forward(zeros); });
  self->shapes_ = shapes;
  return flops;
}

std::vector<ScriptPiece> cut_script_forward(const torch::jit::Module& script, const std::string& file) {
  auto graph = script.get_method("forward").graph()->copy();
  inline_containers(*graph);
  std::vector<Piece> pieces = Segmenter(graph, file).cut();
  std::vector<ScriptPiece> units;
  std::map<std::string, size_t> caller;  // layer path -> the unit that calls it
  for (size_t p = 0; p < pieces.size(); ++p) {
    std::set<std::string> calls, flags;
    auto piece = piece_graph(*graph, pieces[p], calls, flags);
    const std::string name = pieces[p].first_layer.empty() ? c10::str("piece", p + 1) : flat_name(pieces[p].first_layer);
    for (const std::string& path : calls) {
      const auto layer = submodule(script, path);
      if (layer.parameters().size() == 0 && layer.buffers().size() == 0) continue;  // a ReLU may serve twice
      const auto [it, fresh] = caller.emplace(path, p);
      SP_CHECK_ARG(fresh || it->second == p, file, ": ", path.empty() ? "the module" : path,
                   " is called by two pieces of the forward (", it->second + 1, " and ", p + 1,
                   "); a layer whose weights two partitions would share cannot be cut apart");
    }
    ScriptPiece unit;
    unit.name = name;
    unit.weight_layers = pieces[p].weight_layers;
    for (const auto& [skip, v] : pieces[p].pops) unit.skips.pops.push_back(skip);
    for (const auto& [skip, v] : pieces[p].stashes) unit.skips.stashes.push_back(skip);
    unit.module = unit.skips.empty() ? torch::nn::AnyModule(ScriptChainSegment(script, piece, calls, flags, name))
                                     : torch::nn::AnyModule(ScriptSegment(script, piece, calls, flags, name));
    units.push_back(std::move(unit));
  }
  return units;
}

}  // namespace stalepipe::models::detail
