#include "builder_impl.h"
#include "stalepipe/models/blocks.h"

namespace stalepipe::models::detail {

Model make_resnet_cifar(int64_t depth, const InputShape& input) {
  ModelBuilder model("resnet" + std::to_string(depth), input);
  SP_CHECK_ARG(depth >= 8 && (depth - 2) % 6 == 0, "model ", model.name(),
               ": ResNet depth must be 6n+2 (8, 14, 20, 26, 32, ...), got ", depth);
  const int64_t blocks_per_stage = (depth - 2) / 6;
  // Stride-2 stages subsample by ceil(size/2), which never reaches 0: any size >= 1 works.
  append_unit(model, "conv1", ConvBlock(ConvBlockOptions(input.channels, 16, 3).padding(1)
                                            .batch_norm(true)), 1);
  const int64_t kStageChannels[] = {16, 32, 64};
  int64_t in_planes = 16;
  for (int stage = 0; stage < 3; ++stage) {
    for (int64_t i = 0; i < blocks_per_stage; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      append_unit(model, "block" + std::to_string(stage + 1) + "_" + std::to_string(i + 1),
                  BasicBlock(in_planes, kStageChannels[stage], stride), 2);
      in_planes = kStageChannels[stage];
    }
  }
  append_unit(model, "fc", LinearBlock(LinearBlockOptions(64, input.num_classes)
                                           .global_avg_pool(true).relu(false)), 1);
  Model built = model.build();
  init_convs_kaiming(built);
  return built;
}

}  // namespace stalepipe::models::detail
