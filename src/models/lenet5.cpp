#include "builder_impl.h"
#include "stalepipe/models/blocks.h"

namespace stalepipe::models::detail {

Model make_lenet5(const InputShape& input) {
  ModelBuilder model("lenet5", input);
  int64_t h = input.height;
  int64_t w = input.width;
  for (int i = 0; i < 2; ++i) {
    h = shrink(model, shrink(model, h, 5, 1, 0), 2, 2, 0);
    w = shrink(model, shrink(model, w, 5, 1, 0), 2, 2, 0);
  }
  append_unit(model, "conv1", ConvBlock(ConvBlockOptions(input.channels, 6, 5).max_pool(2)), 1);
  append_unit(model, "conv2", ConvBlock(ConvBlockOptions(6, 16, 5).max_pool(2)), 1);
  append_unit(model, "fc1", LinearBlock(LinearBlockOptions(16 * h * w, 120).flatten(true)), 1);
  append_unit(model, "fc2", LinearBlock(LinearBlockOptions(120, 84)), 1);
  append_unit(model, "fc3",
              LinearBlock(LinearBlockOptions(84, input.num_classes).relu(false)), 1);
  return model.build();
}

}  // namespace stalepipe::models::detail
