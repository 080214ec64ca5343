// profile_model on a small model: every unit measured, bytes as the shapes say, JSON round trip.
#include <gtest/gtest.h>

#include "stalepipe/common/error.h"

#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::partition {
namespace {

TEST(Profile, Lenet5Batch8) {
  models::InputShape input;
  input.channels = 1;
  auto model = models::make_model("lenet5", input);
  ProfileOptions options;
  options.batch_size = 8;
  options.warmup = 1;
  options.repeats = 3;
  const Profile p = profile_model(model, options);
  EXPECT_EQ(p.model, "lenet5");
  EXPECT_EQ(p.batch_size, 8);
  EXPECT_EQ(p.input_bytes, 8 * 32 * 32 * 4);
  ASSERT_EQ(p.units.size(), model.units.size());
  int64_t parameter_bytes = 0;
  for (const auto& u : p.units) {
    EXPECT_GT(u.forward_ms, 0) << u.name;
    EXPECT_GT(u.backward_ms, 0) << u.name;
    EXPECT_GE(u.kept_bytes, u.output_bytes) << u.name;
    parameter_bytes += u.parameter_bytes;
  }
  EXPECT_EQ(parameter_bytes, 4 * model.num_parameters());
  EXPECT_EQ(p.units[0].output_bytes, 8 * 6 * 14 * 14 * 4);  // conv1 + pool: 6x14x14
  EXPECT_EQ(p.units[4].output_bytes, 8 * 10 * 4);           // logits
  // No gradient is left behind.
  for (const auto& param : model.as_sequential()->parameters()) {
    EXPECT_FALSE(param.grad().defined());
  }

  const Profile back = from_json(to_json(p), "test");
  ASSERT_EQ(back.units.size(), p.units.size());
  EXPECT_EQ(back.units[2].name, p.units[2].name);
  EXPECT_DOUBLE_EQ(back.units[2].forward_ms, p.units[2].forward_ms);
  EXPECT_EQ(back.units[2].kept_bytes, p.units[2].kept_bytes);
  EXPECT_NE(format_profile_table(p).find("total"), std::string::npos);
  EXPECT_THROW(from_json("{}", "x.json"), RuntimeError);
}

}  // namespace
}  // namespace stalepipe::partition
