// The random draws of a scripted forward's pieces made exact: each comes from the unit
// generator (models/dropout.h), which the pipeline seeds per partition and mini-batch, instead
// of PyTorch's global one. Dropout operations become stalepipe's dropout, the one a
// Sequential's Dropout runs; an operation that takes a Generator (bernoulli_, rand, normal,
// multinomial, ...) is handed unit_generator(device) of the device it draws on.
#include <optional>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "stalepipe/common/error.h"
#include "torchscript_impl.h"

namespace stalepipe::models::detail {
namespace {

using torch::jit::Graph;
using torch::jit::NamedValue;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kExactDropout = c10::Symbol::fromQualString("stalepipe::dropout");
const c10::Symbol kExactDropoutInPlace = c10::Symbol::fromQualString("stalepipe::dropout_");
const c10::Symbol kUnitGenerator = c10::Symbol::fromQualString("stalepipe::unit_generator");

// Registered with the interpreter only (the graphs here are their only callers). CONSERVATIVE
// (or a writer's schema): two equal draws are two draws, which common-subexpression
// elimination must not merge.
torch::jit::RegisterOperators kExactDrawOps({
    torch::jit::Operator(
        "stalepipe::dropout(Tensor input, float p, bool train, int kind) -> Tensor",
        [](torch::jit::Stack& stack) {
          const auto kind = static_cast<DropoutKind>(torch::jit::pop(stack).toInt());
          const bool train = torch::jit::pop(stack).toBool();
          const double p = torch::jit::pop(stack).toDouble();
          const torch::Tensor x = torch::jit::pop(stack).toTensor();
          torch::jit::push(stack, models::dropout(x, p, train, kind));
        },
        c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator(
        "stalepipe::dropout_(Tensor(a!) self, float p, bool train, int kind) -> Tensor(a!)",
        [](torch::jit::Stack& stack) {
          const auto kind = static_cast<DropoutKind>(torch::jit::pop(stack).toInt());
          const bool train = torch::jit::pop(stack).toBool();
          const double p = torch::jit::pop(stack).toDouble();
          torch::Tensor x = torch::jit::pop(stack).toTensor();
          torch::jit::push(stack, x.copy_(models::dropout(x, p, train, kind)));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),  // a writer: never merged
    torch::jit::Operator(
        "stalepipe::unit_generator(Device? device) -> Generator",
        [](torch::jit::Stack& stack) {
          const c10::IValue device = torch::jit::pop(stack);
          torch::jit::push(stack, unit_generator(device.isNone() ? c10::Device(c10::kCPU) : device.toDevice()));
        },
        c10::AliasAnalysisKind::CONSERVATIVE),
});

struct DropoutOp {
  const char* name;
  DropoutKind kind;
  bool in_place;
};
const DropoutOp kDropoutOps[] = {
    {"aten::dropout", DropoutKind::kElement, false},
    {"aten::dropout_", DropoutKind::kElement, true},
    {"aten::feature_dropout", DropoutKind::kFeature, false},
    {"aten::feature_dropout_", DropoutKind::kFeature, true},
    {"aten::alpha_dropout", DropoutKind::kAlpha, false},
    {"aten::alpha_dropout_", DropoutKind::kAlpha, true},
    {"aten::feature_alpha_dropout", DropoutKind::kFeatureAlpha, false},
    {"aten::feature_alpha_dropout_", DropoutKind::kFeatureAlpha, true},
};

std::optional<DropoutOp> dropout_op(const Node& node) {
  for (const DropoutOp& op : kDropoutOps) {
    if (node.kind().toQualString() == std::string(op.name)) return op;
  }
  return std::nullopt;
}

// A dropout (input, p, train) as stalepipe's; one with p = 0 or train = False draws nothing
// and goes.
void replace_dropout(Graph& graph, Node* node, const DropoutOp& op) {
  const auto p = torch::jit::constant_as<double>(node->input(1));
  const auto train = torch::jit::constant_as<bool>(node->input(2));
  Value* out = node->input(0);
  if ((!p || *p != 0) && (!train || *train)) {
    torch::jit::WithInsertPoint guard(node);
    out = graph.insert(op.in_place ? kExactDropoutInPlace : kExactDropout,
                       {node->input(0), node->input(1), node->input(2), c10::IValue(static_cast<int64_t>(op.kind))}, {},
                       node->sourceRange());
    out->setType(node->output()->type());
  }
  node->output()->replaceAllUsesWith(out);
  node->destroy();
}

// unit_generator() of the device `node` draws on: that of its first tensor argument, else its
// `device` argument (a factory: rand, randn, ...), else the CPU.
Value* generator_for(Graph& graph, Node* node) {
  torch::jit::WithInsertPoint guard(node);
  const auto& args = node->schema().arguments();
  Value* device = nullptr;
  for (size_t i = 0; i < args.size() && !device; ++i) {
    if (node->input(i)->type()->kind() == c10::TypeKind::TensorType) {
      device = graph.insert(c10::prim::device, {node->input(i)});
    }
  }
  for (size_t i = 0; i < args.size() && !device; ++i) {
    if (args[i].name() == "device") device = node->input(i);
  }
  if (!device) device = graph.insertConstant(c10::IValue());
  return graph.insert(kUnitGenerator, {device});
}

// The same operation in its overload that takes a generator, handed `generator`; null where it
// has none.
Value* with_generator(Graph& graph, Node* node, Value* generator) {
  const auto& args = node->schema().arguments();
  std::vector<NamedValue> positional, keywords;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kwarg_only()) {
      keywords.emplace_back(args[i].name(), node->input(i));
    } else {
      positional.emplace_back(node->input(i));
    }
  }
  keywords.emplace_back("generator", generator);
  torch::jit::WithInsertPoint guard(node);
  try {
    return graph.insert(node->kind(), positional, keywords, node->sourceRange());
  } catch (const std::exception&) {  // no overload of it takes a generator
    return nullptr;
  }
}

void refuse_draw(const Node& node, const std::string& file, const std::string& why) {
  throw UsageError(c10::str(file, ": ", script_node_place(node), " ", why,
                            "; concurrent partitions could not make its draws exact, so it is refused (draw with "
                            "torch.nn.functional.dropout, torch.bernoulli, torch.rand or torch.randn instead)"));
}

void make_exact(Graph& graph, Node* node, const std::string& file) {
  if (const auto op = dropout_op(*node)) return replace_dropout(graph, node, *op);
  const auto& args = node->schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_generator_type(args[i].type())) {
      node->replaceInput(i, generator_for(graph, node));
      return;
    }
  }
  if (node->outputs().size() != 1) refuse_draw(*node, file, "draws random numbers and takes no generator");
  Value* generator = generator_for(graph, node);
  Value* replacement = with_generator(graph, node, generator);
  if (!replacement) {
    generator->node()->destroy();
    refuse_draw(*node, file, "draws random numbers and has no form that takes a generator");
  }
  replacement->setType(node->output()->type());
  node->output()->replaceAllUsesWith(replacement);
  node->destroy();
}

void make_block_exact(Graph& graph, torch::jit::Block* block, const std::string& file) {
  for (Node* node = block->nodes().front(); node != block->return_node();) {
    Node* next = node->next();
    for (torch::jit::Block* inner : node->blocks()) make_block_exact(graph, inner, file);
    switch (node_draw(*node)) {
      case RandomDraw::kNone: break;
      case RandomDraw::kDraws: make_exact(graph, node, file); break;
      case RandomDraw::kUnknown:
        refuse_draw(*node, file, "is registered without the tags that say whether it draws random numbers, "
                                 "and stalepipe does not know it not to");
    }
    node = next;
  }
}

bool block_draws(const torch::jit::Block* block) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == kExactDropout || node->kind() == kExactDropoutInPlace || node->kind() == kUnitGenerator) {
      return true;
    }
    for (const torch::jit::Block* inner : node->blocks()) {
      if (block_draws(inner)) return true;
    }
  }
  return false;
}

}  // namespace

void make_draws_exact(Graph& graph, const std::string& file) { make_block_exact(graph, graph.block(), file); }

bool draws_random_numbers(const Graph& graph) { return block_draws(graph.block()); }

}  // namespace stalepipe::models::detail
