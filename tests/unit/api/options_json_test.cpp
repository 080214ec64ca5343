// config.json and experiment files as read by options_from_json: a number a field cannot
// hold is an error naming the file, not a cast (which is undefined behaviour past the range).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stalepipe/api/options_json.h"
#include "stalepipe/common/error.h"
#include "support/error_of.h"

namespace stalepipe {
namespace {

std::string config_error_of(const nlohmann::json& j) {
  return test::error_of<RuntimeError>([&] { options_from_json(j, "run/config.json"); });
}

TEST(OptionsJson, NumbersAFieldCannotHoldAreRefusedNamingTheFile) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"batch_size", 1e300}, {"batch_size", 2.5}, {"seed", -1}, {"threads", 4294967296LL},
           {"eval_every", "many"}}) {
    const std::string message = config_error_of({{"model", "lenet5"}, {key, value}});
    EXPECT_EQ(message.rfind("run/config.json: not a valid stalepipe config: ", 0), 0u) << key << ": " << message;
  }
  EXPECT_NE(config_error_of({{"batch_size", 1e300}}).find("expected an integer from"), std::string::npos);
  // Whole numbers in range still read, as before.
  EXPECT_EQ(options_from_json({{"batch_size", 64}, {"seed", 18446744073709551615ULL}}, "ok").data().batch_size(), 64);
}

TEST(OptionsJson, RecomputationIsStoredButNotHashed) {
  // It changes what is kept, not the weights, so a run may resume with or without it.
  Options o;
  o.run().model("resnet20");
  o.pipeline().ppv({7}).recompute(7);
  const Options back = options_from_json(to_json(o), "test");
  EXPECT_EQ(back.pipeline().recompute(), 7);
  Options plain = o;
  plain.pipeline().recompute(0);
  EXPECT_EQ(config_hash(o), config_hash(plain));
  o.pipeline().recompute(-1);
  try {
    check_options(o);
    ADD_FAILURE() << "recompute -1 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("PipelineOptions::recompute must be a weight layer"), std::string::npos);
  }
}

}  // namespace
}  // namespace stalepipe
