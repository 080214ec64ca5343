// `stalepipe layers --model NAME | --model-file FILE`: the unit table and where registers may go.
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "stalepipe/common/error.h"
#include "stalepipe/api/options.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/torchscript.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::cli {

Command add_layers(CLI::App& app) {
  auto model = std::make_shared<std::string>("lenet5");
  auto model_file = std::make_shared<std::string>();
  auto channels = std::make_shared<int64_t>(1);
  auto image_size = std::make_shared<int64_t>(0);
  auto classes = std::make_shared<int64_t>(10);
  auto dropout = std::make_shared<double>(RunOptions().dropout());
  auto* name = app.add_option("--model", *model, zoo_model_choices())->capture_default_str();
  auto* file = app.add_option("--model-file", *model_file, "a TorchScript file saved by PyTorch 1.13 (as train --model-file)");
  name->excludes(file);
  app.add_option("--channels", *channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  app.add_option("--image-size", *image_size, "inputs of S x S pixels (0: 32 x 32), as train --image-size gives")
      ->capture_default_str();
  app.add_option("--classes", *classes, "classes the last unit scores")->capture_default_str();
  auto* drop = app.add_option("--dropout", *dropout, "alexnet, vgg16: dropout probability before each hidden fc layer");
  drop->capture_default_str()->excludes(file);
  return [model, model_file, channels, image_size, classes, dropout]() {
    SP_CHECK_ARG(*image_size >= 0, "--image-size ", *image_size, ": expected 0 (32 x 32) or a size in pixels");
    models::InputShape input;
    input.channels = *channels;
    if (*image_size > 0) input.height = input.width = *image_size;
    input.num_classes = *classes;
    auto m = model_file->empty() ? models::make_model(*model, input, models::ZooOptions().dropout(*dropout))
                                 : models::load_torchscript(*model_file, input);
    const auto rows = models::describe_units(m);
    std::fputs(models::format_layer_table(m, rows).c_str(), stdout);
    if (model_file->empty() && models::has_dropout_placement(*model)) {
      std::printf("dropout: p = %g before fc1 and fc2 (--dropout; default %g: none)\n", *dropout,
                  RunOptions().dropout());
    }
    return 0;
  };
}

}  // namespace stalepipe::cli
