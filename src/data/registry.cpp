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

std::string valid_specs() {
  return "fashion-mnist, fashion-mnist:DIR, mnist:DIR, kmnist:DIR, cifar10:DIR, synthetic, "
         "synthetic:N, synthetic-regression, synthetic-regression:N";
}

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

// A split with each image's mean pixel value (0..1) as its target instead of its class.
Dataset as_regression(Dataset d) {
  d.labels = d.images.to(torch::kFloat).mean({1, 2, 3}).div_(255).unsqueeze(1);
  d.num_classes = 0;
  d.name = "synthetic-regression" + d.name.substr(d.name.find('/'));
  return d;
}

}  // namespace

std::vector<std::string> dataset_names() {
  return {"fashion-mnist", "mnist", "kmnist", "cifar10", "synthetic", "synthetic-regression"};
}

DataSplit load_dataset(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? spec.substr(colon + 1) : std::string();

  if (name == "synthetic" || name == "synthetic-regression") {
    SyntheticOptions options;
    if (has_arg) {
      const int64_t n = parse_count(spec, arg);
      options.train_size(n).test_size(std::max<int64_t>(1, n / 4));
    }
    DataSplit split = make_synthetic(options);
    if (name == "synthetic") return split;
    return {as_regression(std::move(split.train)), as_regression(std::move(split.test))};
  }
  if (name == "fashion-mnist" || name == "mnist" || name == "kmnist" || name == "cifar10") {
    std::string dir = arg;
    if (!has_arg && name == "fashion-mnist") {
      dir = kFashionMnistDefaultDir;
    }
    SP_CHECK_ARG(!dir.empty(), "data set spec '", spec, "': ", name, " needs a directory: ", name,
        ":DIR");
    if (!has_arg) {
      std::error_code error;
      SP_CHECK(std::filesystem::is_directory(dir, error), dir, ": data set directory does not "
          "exist; install Debian's dataset-fashion-mnist package or pass fashion-mnist:DIR");
    }
    return name == "cifar10" ? load_cifar10(dir) : load_idx_dir(dir, name);
  }
  SP_CHECK_ARG(false, "data set spec '", spec, "': unknown data set '", name, "'; expected one of ",
      valid_specs());
  return {};
}

}  // namespace data
}  // namespace stalepipe
