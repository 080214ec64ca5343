#include "builder_impl.h"
#include "stalepipe/models/blocks.h"

namespace stalepipe::models::detail {

// Layer shapes are documented in zoo.h; 4096-wide fc layers keep the paper's weight size
// (table 9: 88.87 MB) while the convs stay cheap on 32x32 inputs.
Model make_alexnet(const InputShape& input, double dropout) {
  ModelBuilder model("alexnet", input);
  auto spatial = [&](int64_t size) {
    size = shrink(model, shrink(model, size, 5, 2, 2), 2, 2, 0);  // conv1, pool
    size = shrink(model, size, 2, 2, 0);                          // conv2 keeps size; pool
    return shrink(model, size, 2, 2, 0);                          // conv3-5 keep size; pool
  };
  const int64_t flat = 256 * spatial(input.height) * spatial(input.width);
  append_unit(model, "conv1",
              ConvBlock(ConvBlockOptions(input.channels, 64, 5).stride(2).padding(2).max_pool(2)),
              1);
  append_unit(model, "conv2", ConvBlock(ConvBlockOptions(64, 192, 3).padding(1).max_pool(2)), 1);
  append_unit(model, "conv3", ConvBlock(ConvBlockOptions(192, 384, 3).padding(1)), 1);
  append_unit(model, "conv4", ConvBlock(ConvBlockOptions(384, 256, 3).padding(1)), 1);
  append_unit(model, "conv5", ConvBlock(ConvBlockOptions(256, 256, 3).padding(1).max_pool(2)), 1);
  append_unit(model, "fc1", LinearBlock(LinearBlockOptions(flat, 4096).flatten(true).dropout(dropout)), 1);
  append_unit(model, "fc2", LinearBlock(LinearBlockOptions(4096, 4096).dropout(dropout)), 1);
  append_unit(model, "fc3",
              LinearBlock(LinearBlockOptions(4096, input.num_classes).relu(false)), 1);
  return model.build();
}

}  // namespace stalepipe::models::detail
