#include "support/script_modules.h"

#include <fstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

namespace stalepipe::test {
namespace {

// As torch.nn.Parameter: trainable.
torch::Tensor parameter(torch::Tensor t) { return t.requires_grad_(); }

torch::jit::Module make(const std::string& cls) {
  torch::jit::Module m("__torch__.torch.nn.modules." + cls);
  m.register_attribute("training", c10::BoolType::get(), true);
  return m;
}

}  // namespace

torch::jit::Module script_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel) {
  auto m = make("conv.Conv2d");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel * kernel));
  m.register_parameter("weight", parameter(torch::rand({out_channels, in_channels, kernel, kernel}) * 2 * bound - bound), false);
  m.register_parameter("bias", parameter(torch::rand({out_channels}) * 2 * bound - bound), false);
  m.define(R"(
def forward(self, x):
    return torch.conv2d(x, self.weight, self.bias)
)");
  return m;
}

torch::jit::Module script_linear(int64_t in_features, int64_t out_features) {
  auto m = make("linear.Linear");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  m.register_parameter("weight", parameter(torch::rand({out_features, in_features}) * 2 * bound - bound), false);
  m.register_parameter("bias", parameter(torch::rand({out_features}) * 2 * bound - bound), false);
  m.define(R"(
def forward(self, x):
    return torch.linear(x, self.weight, self.bias)
)");
  return m;
}

namespace {

// A ReLU whose forward is torch.`op`(x): relu, or relu_ (in place, as inplace=True scripts).
torch::jit::Module relu_calling(const char* op) {
  auto m = make("activation.ReLU");
  m.define(c10::str("\ndef forward(self, x):\n    return torch.", op, "(x)\n"));
  return m;
}

}  // namespace

torch::jit::Module script_relu() { return relu_calling("relu"); }

torch::jit::Module script_relu_inplace() { return relu_calling("relu_"); }

torch::jit::Module script_max_pool2d(int64_t kernel) {
  auto m = make("pooling.MaxPool2d");
  m.define(c10::str(R"(
def forward(self, x):
    return torch.max_pool2d(x, [)", kernel, ", ", kernel, "])\n"));
  return m;
}

torch::jit::Module script_flatten() {
  auto m = make("flatten.Flatten");
  m.define(R"(
def forward(self, x):
    return torch.flatten(x, 1)
)");
  return m;
}

torch::jit::Module script_batch_norm2d(int64_t channels) {
  auto m = make("batchnorm.BatchNorm2d");
  m.register_parameter("weight", parameter(torch::ones({channels})), false);
  m.register_parameter("bias", parameter(torch::zeros({channels})), false);
  m.register_buffer("running_mean", torch::zeros({channels}));
  m.register_buffer("running_var", torch::ones({channels}));
  m.register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  m.define(R"(
def forward(self, x):
    if self.training:
        self.num_batches_tracked.add_(1)
    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                            self.training, 0.1, 1e-5, False)
)");
  return m;
}

torch::jit::Module script_dropout(double p) {
  auto m = make("dropout.Dropout");
  m.register_attribute("p", c10::FloatType::get(), p);
  m.define(R"(
def forward(self, x):
    return torch.dropout(x, self.p, self.training)
)");
  return m;
}

torch::jit::Module script_module(const std::string& type,
                                 const std::vector<std::pair<std::string, torch::jit::Module>>& children,
                                 const std::string& forward_source,
                                 const std::function<void(torch::jit::Module&)>& attributes) {
  torch::jit::Module m(type);
  m.register_attribute("training", c10::BoolType::get(), true);
  for (const auto& [name, child] : children) m.register_module(name, child);
  if (attributes) attributes(m);
  m.define(forward_source);
  return m;
}

namespace {

// Resolves the names of a compilation unit's functions, then what the native resolver knows
// ("torch").
struct FunctionResolver : torch::jit::Resolver {
  explicit FunctionResolver(std::shared_ptr<torch::jit::CompilationUnit> unit) : unit_(std::move(unit)) {}
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& m,
                                                         const torch::jit::SourceRange& loc) override {
    for (torch::jit::Function* f : unit_->get_functions()) {
      if (f->name() == name) return std::make_shared<torch::jit::FunctionValue>(torch::jit::StrongFunctionPtr(unit_, f));
    }
    return torch::jit::nativeResolver()->resolveValue(name, m, loc);
  }
  std::shared_ptr<torch::jit::CompilationUnit> unit_;
};

}  // namespace

void define_with_functions(torch::jit::Module& module, const std::string& functions_source,
                           const std::string& forward_source) {
  const auto unit = module._ivalue()->compilation_unit();
  const auto resolver = std::make_shared<FunctionResolver>(unit);
  unit->define(c10::QualifiedName("__torch__.functions"), functions_source, resolver, nullptr);
  module.define(forward_source, resolver);
}

torch::jit::Module script_sequential(const std::vector<torch::jit::Module>& children) {
  std::vector<std::pair<std::string, torch::jit::Module>> named;
  std::string source = "\ndef forward(self, x):\n";
  for (size_t i = 0; i < children.size(); ++i) {
    named.emplace_back(std::to_string(i), children[i]);
    source += c10::str("    x = getattr(self, \"", i, "\").forward(x)\n");
  }
  source += "    return x\n";
  return script_module("__torch__.torch.nn.modules.container.Sequential", named, source);
}

torch::jit::Module script_small_cnn() {
  return script_sequential(
      {script_sequential({script_conv2d(1, 4, 3), script_batch_norm2d(4), script_relu(), script_max_pool2d(2)}),
       script_flatten(),
       script_sequential({script_linear(36, 16), script_relu(), script_linear(16, 3)})});
}

namespace {

std::string save_archive(const std::string& path, uint64_t version) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.setMinVersion(version);
  const std::string data = "not read";
  writer.writeRecord("data.pkl", data.data(), data.size());
  writer.writeEndOfFile();
  return path;
}

}  // namespace

std::string save_future_archive(const std::string& path) { return save_archive(path, 99); }

std::string save_torch_save_archive(const std::string& path) { return save_archive(path, 3); }

std::string damage_record(const std::string& path, const std::string& record) {
  const auto offset = caffe2::serialize::PyTorchStreamReader(path).getRecordOffset(record);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset));
  const char byte = static_cast<char>(file.get() ^ 1);
  file.seekp(static_cast<std::streamoff>(offset));
  file.put(byte);
  return path;
}

std::string save_script(torch::jit::Module module, const std::string& path) {
  module.save(path);
  return path;
}

}  // namespace stalepipe::test
