#include <string>
#include <vector>

#include "builder_impl.h"
#include "stalepipe/models/blocks.h"

namespace stalepipe::models::detail {
namespace {

// After the stem: stages of BasicBlocks "block<stage>_<i>" (stride 2 at the first block of
// every stage but the first), each the units "block<stage>_<i>a" and "...b" with the block's
// input as the skip tensor "block<stage>_<i>" between them; then global average pool + fc;
// builds and initialises.
Model finish_resnet(ModelBuilder& model, int64_t in_planes, const std::vector<int64_t>& stages,
                    int64_t blocks_per_stage, Shortcut shortcut) {
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    for (int64_t i = 0; i < blocks_per_stage; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const std::string name = "block" + std::to_string(stage + 1) + "_" + std::to_string(i + 1);
      const auto options = BasicBlockOptions(in_planes, stages[stage], stride).shortcut(shortcut);
      model.add(name + "a", BasicBlockHead(options), UnitOptions().weight_layers(1).stashes({name}));
      model.add(name + "b", BasicBlockTail(options), UnitOptions().weight_layers(1).pops({name}));
      in_planes = stages[stage];
    }
  }
  append_unit(model, "fc", LinearBlock(LinearBlockOptions(in_planes, model.input().num_classes)
                                           .global_avg_pool(true).relu(false)), 1);
  Model built = model.build();
  init_convs_kaiming(built);
  return built;
}

}  // namespace

Model make_resnet_cifar(int64_t depth, const InputShape& input) {
  ModelBuilder model("resnet" + std::to_string(depth), input);
  SP_CHECK_ARG(depth >= 8 && (depth - 2) % 6 == 0, "model ", model.name(), ": ", kResNetDepths,
               ", got ", depth);
  // Stride-2 stages subsample by ceil(size/2), which never reaches 0: any size >= 1 works.
  append_unit(model, "conv1", ConvBlock(ConvBlockOptions(input.channels, 16, 3).padding(1)
                                            .batch_norm(true)), 1);
  return finish_resnet(model, 16, {16, 32, 64}, (depth - 2) / 6, Shortcut::kZeroPad);
}

Model make_resnet18(const InputShape& input) {
  ModelBuilder model("resnet18", input);
  // The stem and the three stride-2 stages reduce by 32: 32x32 ends at 1x1 before the global
  // pool. Smaller inputs would still run (padded strided layers never reach 0) but would pool
  // padding, not image.
  SP_CHECK_ARG(input.height >= 32 && input.width >= 32, "model resnet18: input ", input.height,
               "x", input.width, " is too small; it needs at least 32x32 (it reduces by 32)");
  append_unit(model, "conv1",
              ConvBlock(ConvBlockOptions(input.channels, 64, 7).stride(2).padding(3)
                            .batch_norm(true).max_pool(3).max_pool_stride(2).max_pool_padding(1)),
              1);
  return finish_resnet(model, 64, {64, 128, 256, 512}, 2, Shortcut::kProjection);
}

}  // namespace stalepipe::models::detail
