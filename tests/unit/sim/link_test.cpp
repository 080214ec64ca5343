// The link model, register bytes and the 2-GPU prediction of the paper's Table 5.
#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/link.h"
#include "stalepipe/sim/simulate.h"
#include "stalepipe/sim/table5.h"
#include "support/error_of.h"

namespace stalepipe::sim {
namespace {

using schedule::ScheduleKind;

template <typename F>
std::string usage_error(F f) {
  return test::error_of<UsageError>(f);
}

TEST(Link, MessageIsLatencyPlusBytesOverBandwidth) {
  const LinkModel link = parse_link("2e9,1e-5", "--link");
  EXPECT_EQ(link.name, "custom");
  EXPECT_DOUBLE_EQ(link.message_seconds(0), 1e-5);
  EXPECT_DOUBLE_EQ(link.message_seconds(4'000'000), 1e-5 + 2e-3);
  // Unlimited bandwidth: the latency alone, as the old fixed transfer time.
  EXPECT_DOUBLE_EQ(fixed_link(0.5).message_seconds(1'000'000'000), 0.5);
  EXPECT_DOUBLE_EQ(LinkModel().message_seconds(1'000'000'000), 0.0);
}

TEST(Link, PresetsByName) {
  const LinkModel nvlink = parse_link("nvlink4", "--link");
  EXPECT_EQ(nvlink.name, "nvlink4");
  EXPECT_DOUBLE_EQ(nvlink.bandwidth_bytes_per_second, 450e9);
  EXPECT_DOUBLE_EQ(nvlink.latency_seconds, 5e-6);
  EXPECT_DOUBLE_EQ(parse_link("pcie4", "--link").bandwidth_bytes_per_second, 25e9);
  EXPECT_DOUBLE_EQ(parse_link("pcie5", "--link").bandwidth_bytes_per_second, 50e9);
  EXPECT_DOUBLE_EQ(parse_link("ideal", "--link").message_seconds(1'000'000'000), 0.0);
  ASSERT_EQ(link_presets().size(), 5u);
  EXPECT_EQ(link_presets().front().name, "ideal");
  EXPECT_EQ(nvlink.describe(), "nvlink4 (450 GB/s, 5 us)");
}

TEST(Link, BadSpecsAreRefusedNamingTheFieldAndTheFault) {
  const std::string unknown = usage_error([] { parse_link("nvlink9", "--link"); });
  EXPECT_NE(unknown.find("--link nvlink9: not a link; expected one of ideal, nvlink4"), std::string::npos) << unknown;
  const std::string bandwidth = usage_error([] { parse_link("fast,1e-6", "--link"); });
  EXPECT_NE(bandwidth.find("--link fast,1e-6: the bandwidth 'fast'"), std::string::npos) << bandwidth;
  EXPECT_NE(usage_error([] { parse_link("0,1e-6", "--link"); }).find("bandwidth '0'"), std::string::npos);
  const std::string latency = usage_error([] { parse_link("25e9,-1", "--link"); });
  EXPECT_NE(latency.find("the latency '-1' must be a number of seconds >= 0"), std::string::npos) << latency;
  EXPECT_NE(usage_error([] { parse_link("25e9,", "--link"); }).find("latency ''"), std::string::npos);
  EXPECT_EQ(usage_error([] { parse_link("25e9,1e-5", "--link"); }), "(no error thrown)");
  for (const auto& message : {unknown, bandwidth, latency}) EXPECT_EQ(message.find('\n'), std::string::npos);
  // A link built in code with a negative latency is refused by the simulator.
  PartitionCosts costs;
  costs.forward_seconds = costs.backward_seconds = {1, 1};
  SimulateOptions options;
  options.link = fixed_link(-1);
  EXPECT_THROW(simulate(schedule::make_schedule(ScheduleKind::kStale, 2, 0, 20), costs, options), UsageError);
}

TEST(Link, MessagesCarryTheRegistersBytes) {
  // F = B = 1 s per partition; partition 1's output is 1000 bytes; the link moves 1000 B/s
  // after 0.25 s: every message takes 1.25 s. Sequential K = 2: F1, message, F2, B2,
  // message, B1 = 4 + 2 x 1.25 per step. Stale K = 2: the cycle B1(t) -> F1(t+2) -> message
  // -> F2(t+2) -> B2(t+2) -> message -> B1(t+2) spans two mini-batches: (4 + 2.5) / 2 each.
  PartitionCosts costs;
  costs.forward_seconds = costs.backward_seconds = {1, 1};
  costs.output_bytes = {1000, 10};
  SimulateOptions options;
  options.link = parse_link("1000,0.25", "--link");
  const auto sequential = simulate(schedule::make_schedule(ScheduleKind::kSequential, 2, 0, 20), costs, options);
  EXPECT_DOUBLE_EQ(sequential.steady_step_seconds, 6.5);
  const auto stale = simulate(schedule::make_schedule(ScheduleKind::kStale, 2, 0, 40), costs, options);
  EXPECT_DOUBLE_EQ(stale.steady_step_seconds, 3.25);
  // Micro-batches send their share of the bytes: 4 micro-batches of 250 bytes, 0.5 s each.
  const auto gpipe = simulate(schedule::make_schedule(ScheduleKind::kGPipe, 2, 0, 20, 4), costs, options);
  for (const auto& e : gpipe.events) {
    if (e.worker == 1 && e.op.kind == schedule::OpKind::kForward && e.op.step == 0 && e.op.micro == 0) {
      EXPECT_DOUBLE_EQ(e.start_seconds, 0.25 + 0.5);
    }
  }
}

TEST(Link, RegisterBytesAreThePartitionsOutput) {
  // ResNet-20 cut after the stem and stage 1 (PPV 7): the register carries 16 channels of
  // 32x32 floats per sample.
  models::InputShape input;
  input.channels = 3;
  auto model = models::make_model("resnet20", input);
  partition::ProfileOptions options;
  options.batch_size = 4;
  options.warmup = 0;
  options.repeats = 1;
  const auto profile = partition::profile_model(model, options);
  const auto costs = partition_costs(profile, partition::make_plan(model, {7}));
  ASSERT_EQ(costs.output_bytes.size(), 2u);
  EXPECT_EQ(costs.output_bytes[0], 4 * 16 * 32 * 32 * 4);
  EXPECT_EQ(costs.output_bytes[1], 4 * 10 * 4);  // the logits
}

// A 3-unit stand-in for ResNet-56 cut after unit 2: partition 1 F + B = 1 + 1 + 2 + 2 ms,
// partition 2 = 2 + 4 ms, a 4.5 MB register.
partition::Profile synthetic_profile() {
  partition::Profile profile;
  profile.model = "resnet56";
  profile.batch_size = 128;
  const double forward[] = {1, 1, 2}, backward[] = {2, 2, 4};
  for (int u = 0; u < 3; ++u) {
    partition::UnitProfile unit;
    unit.index = u;
    unit.forward_ms = forward[u];
    unit.backward_ms = backward[u];
    unit.output_bytes = u == 1 ? 4'500'000 : 1000;
    profile.units.push_back(unit);
  }
  return profile;
}

TEST(Table5, PredictsTheSpeedupPerLinkBesideThePapers) {
  auto profile = synthetic_profile();
  partition::Plan plan;
  plan.unit_ranges = {{0, 2}, {2, 3}};
  const PaperTable5Row& paper = paper_table5().front();
  EXPECT_EQ(paper.model, "resnet56");
  EXPECT_EQ(paper.ppv, 19);
  EXPECT_DOUBLE_EQ(paper.pipelined_speedup, 1.65);
  const std::vector<LinkModel> links = {parse_link("ideal", "l"), parse_link("nvlink4", "l"), parse_link("pcie4", "l")};
  auto row = predict_table5_row(profile, plan, paper, links);
  EXPECT_EQ(row.register_bytes, 4'500'000);
  EXPECT_NEAR(row.non_pipelined_step_ms, 12.0, 1e-9);
  ASSERT_EQ(row.links.size(), 3u);
  // Compute alone: both partitions take 6 ms, so one mini-batch every 6 ms, 2x.
  EXPECT_NEAR(row.links[0].speedup, 2.0, 1e-9);
  // NVLink 4: 5 us + 4.5 MB / 450 GB/s = 15 us per message, two per cycle of two mini-batches.
  EXPECT_NEAR(row.links[1].message_ms, 0.015, 1e-12);
  EXPECT_NEAR(row.links[1].speedup, 12.0 / 6.015, 1e-9);
  // PCIe 4: 10 us + 180 us.
  EXPECT_NEAR(row.links[2].speedup, 12.0 / 6.19, 1e-9);
  EXPECT_TRUE(row.model_vs_measured.empty());
  const std::string text = format_table5({row});
  EXPECT_NE(text.find("resnet56 (19)"), std::string::npos) << text;
  EXPECT_NE(text.find("1.65x    2.00x    2.00x    1.94x  not measured"), std::string::npos) << text;
  EXPECT_NE(text.find("pcie4 (25 GB/s, 10 us): 0.19 ms"), std::string::npos) << text;

  // With partitions measured as blocks (5 and 4 ms), the model's sums are checked against them.
  profile.partitions = {{0, 2, 2.0, 3.0}, {2, 3, 1.0, 3.0}};
  row = predict_table5_row(profile, plan, paper, links);
  ASSERT_EQ(row.model_vs_measured.size(), 2u);
  EXPECT_DOUBLE_EQ(row.model_vs_measured[0], 6.0 / 5.0);
  EXPECT_DOUBLE_EQ(row.model_vs_measured[1], 6.0 / 4.0);
  EXPECT_NE(format_table5({row}).find("1.200 / 1.500"), std::string::npos);

  // A profile of another network, or a plan that is not 2 partitions, is refused.
  profile.model = "resnet110";
  EXPECT_NE(usage_error([&] { predict_table5_row(profile, plan, paper, links); }).find("needs a profile of resnet56"),
            std::string::npos);
  profile.model = "resnet56";
  plan.unit_ranges = {{0, 3}};
  EXPECT_THROW(predict_table5_row(profile, plan, paper, links), UsageError);
}

}  // namespace
}  // namespace stalepipe::sim
