#include "stalepipe/data/registry.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "stalepipe/common/error.h"
#include "stalepipe/data/cifar10.h"
#include "stalepipe/data/idx.h"
#include "stalepipe/data/synthetic.h"

namespace stalepipe {
namespace data {
namespace {

// Parses N of "synthetic:N": digits only, 1..2^32.
int64_t parse_count(const std::string& spec, const std::string& text) {
  bool digits = !text.empty() && text.size() <= 10;
  for (char ch : text) {
    digits = digits && std::isdigit(static_cast<unsigned char>(ch));
  }
  const int64_t n = digits ? std::stoll(text) : 0;
  SP_CHECK_ARG(n >= 1 && n <= (int64_t{1} << 32), "data set spec '", spec,
      "': expected synthetic:N with N a number of training samples >= 1, found '", text, "'");
  return n;
}

// The data sets generated here, which take an optional sample count instead of a directory.
bool is_synthetic(const std::string& name) {
  return name == "synthetic" || name == "synthetic-regression" || name == "synthetic-masks";
}

// A split with each image's mean pixel value (0..1) as its target instead of its class.
Dataset as_regression(Dataset d) {
  d.labels = d.images.to(torch::kFloat).mean({1, 2, 3}).div_(255).unsqueeze(1);
  d.num_classes = 0;
  d.name = "synthetic-regression" + d.name.substr(d.name.find('/'));
  return d;
}

}  // namespace

std::vector<std::string> dataset_names() {
  return {"fashion-mnist", "mnist", "kmnist", "cifar10", "folder", "synthetic", "synthetic-regression",
          "synthetic-masks"};
}

std::string dataset_choices() {
  std::string text;
  for (const std::string& name : dataset_names()) {
    const char* form = is_synthetic(name) ? "[:N]" : name == "fashion-mnist" ? "[:DIR]" : ":DIR";
    text += (text.empty() ? "" : " | ") + name + form;
  }
  return text;
}

DatasetSpec parse_dataset_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  DatasetSpec parsed;
  parsed.name = spec.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? spec.substr(colon + 1) : std::string();
  const std::string& name = parsed.name;
  if (is_synthetic(name)) {
    if (has_arg) parsed.synthetic_train = parse_count(spec, arg);
    return parsed;
  }
  const auto names = dataset_names();
  SP_CHECK_ARG(std::find(names.begin(), names.end(), name) != names.end(), "data set spec '", spec,
               "': unknown data set '", name, "'; expected one of ", dataset_choices());
  parsed.dir = has_arg || name != "fashion-mnist" ? arg : std::string(kFashionMnistDefaultDir);
  SP_CHECK_ARG(!parsed.dir.empty(), "data set spec '", spec, "': ", name, " needs a directory: ", name,
      ":DIR");
  return parsed;
}

DataSplit load_dataset(const std::string& spec) {
  const DatasetSpec parsed = parse_dataset_spec(spec);
  if (is_synthetic(parsed.name)) {
    SyntheticOptions options;
    if (parsed.synthetic_train > 0) {
      const int64_t n = parsed.synthetic_train;
      options.train_size(n).test_size(std::max<int64_t>(1, n / 4));
    }
    // Segmentation at the zoo's 32x32, in 4 classes (background and 3 kinds of rectangle).
    if (parsed.name == "synthetic-masks") return make_synthetic_masks(options.height(32).width(32).num_classes(4));
    DataSplit split = make_synthetic(options);
    if (parsed.name == "synthetic") return split;
    return {as_regression(std::move(split.train)), as_regression(std::move(split.test))};
  }
  SP_CHECK_ARG(parsed.name != "folder", "data set spec '", spec, "': an image folder is decoded as batches need it, "
               "not loaded into memory; use load_sources");
  if (spec.find(':') == std::string::npos) {  // the default directory of Debian's package
    std::error_code error;
    SP_CHECK(std::filesystem::is_directory(parsed.dir, error), parsed.dir, ": data set directory does not "
        "exist; install Debian's dataset-fashion-mnist package or pass fashion-mnist:DIR");
  }
  return parsed.name == "cifar10" ? load_cifar10(parsed.dir) : load_idx_dir(parsed.dir, parsed.name);
}

SourceSplit load_sources(const std::string& spec, const FolderOptions& folder) {
  const DatasetSpec parsed = parse_dataset_spec(spec);
  SourceSplit out;
  if (parsed.name == "folder") {
    out.scanned = scan_folder(parsed.dir, folder);
    out.train = out.scanned->train;
    out.test = out.scanned->test;
    return out;
  }
  DataSplit split = load_dataset(spec);
  out.train = std::make_shared<TensorSource>(std::move(split.train));
  out.test = std::make_shared<TensorSource>(std::move(split.test));
  return out;
}

}  // namespace data
}  // namespace stalepipe
