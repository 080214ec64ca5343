#include "builder_impl.h"
#include "stalepipe/models/blocks.h"

namespace stalepipe::models::detail {

Model make_vgg16(const InputShape& input, double dropout) {
  // Output channels of the 13 convs; true where a 2x2 max pool follows.
  struct Layer {
    int64_t channels;
    bool pool;
  };
  static const Layer kConvs[] = {{64, false},  {64, true},   {128, false}, {128, true},
                                 {256, false}, {256, false}, {256, true},  {512, false},
                                 {512, false}, {512, true},  {512, false}, {512, false},
                                 {512, true}};
  ModelBuilder model("vgg16", input);
  int64_t h = input.height;
  int64_t w = input.width;
  int64_t in_channels = input.channels;
  int index = 1;
  for (const Layer& layer : kConvs) {
    auto options = ConvBlockOptions(in_channels, layer.channels, 3).padding(1).batch_norm(true);
    if (layer.pool) {
      options.max_pool(2);
      h = shrink(model, h, 2, 2, 0);
      w = shrink(model, w, 2, 2, 0);
    }
    append_unit(model, "conv" + std::to_string(index++), ConvBlock(options), 1);
    in_channels = layer.channels;
  }
  append_unit(model, "fc1",
              LinearBlock(LinearBlockOptions(512 * h * w, 512).flatten(true).dropout(dropout)), 1);
  append_unit(model, "fc2", LinearBlock(LinearBlockOptions(512, 512).dropout(dropout)), 1);
  append_unit(model, "fc3", LinearBlock(LinearBlockOptions(512, input.num_classes).relu(false)),
              1);
  Model built = model.build();
  init_convs_kaiming(built);
  return built;
}

}  // namespace stalepipe::models::detail
