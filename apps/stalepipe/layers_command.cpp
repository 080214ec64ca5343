// `stalepipe layers --model NAME`: the unit table and where registers may go.
#include <cstdio>

#include "commands.h"
#include "stalepipe/api/options.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::cli {

Command add_layers(CLI::App& app) {
  auto model = std::make_shared<std::string>("lenet5");
  auto channels = std::make_shared<int64_t>(1);
  auto dropout = std::make_shared<double>(RunOptions().dropout());
  app.add_option("--model", *model, "lenet5 | alexnet | vgg16 | resnet<6n+2>")->capture_default_str();
  app.add_option("--channels", *channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  app.add_option("--dropout", *dropout, "alexnet, vgg16: dropout probability before each hidden fc layer")->capture_default_str();
  return [model, channels, dropout]() {
    models::InputShape input;
    input.channels = *channels;
    auto m = models::make_model(*model, input, models::ZooOptions().dropout(*dropout));
    const auto rows = models::describe_units(m);
    std::fputs(models::format_layer_table(m, rows).c_str(), stdout);
    if (models::has_dropout_placement(*model)) {
      std::printf("dropout: p = %g before fc1 and fc2 (--dropout; default %g: none)\n", *dropout,
                  RunOptions().dropout());
    }
    return 0;
  };
}

}  // namespace stalepipe::cli
