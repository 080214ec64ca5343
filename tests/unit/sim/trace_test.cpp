// Traces recorded from the real executors: one event per op, in program order, no overlap on
// a worker; the Chrome JSON parses and the SVG is produced.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <ATen/Parallel.h>

#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/sim/trace.h"

namespace stalepipe::sim {
namespace {

std::vector<OpEvent> record(const std::string& executor, const schedule::Schedule& s) {
  at::set_num_threads(1);
  torch::manual_seed(3);
  models::InputShape input;
  input.channels = 1;
  const auto model = models::make_model("lenet5", input);
  const auto plan = partition::make_plan(model, {2, 4});
  exec::Pipeline pipeline(model, plan, std::vector<torch::Device>(3, torch::kCPU), optim::UpdateOptions());
  TraceRecorder trace;
  exec::SegmentContext context;
  context.input = [](int64_t) {
    return exec::Input{torch::randn({4, 1, 32, 32}), torch::randint(0, 10, {4}, torch::kInt64)};
  };
  context.lr = [](int64_t) { return 0.01; };
  context.threads_per_worker.assign(3, 1);
  context.on_op = trace.callback();
  exec::make_executor(exec::executor_from_name(executor))->run(s, pipeline.stages(), context);
  return trace.events();
}

void expect_one_event_per_op(const schedule::Schedule& s, const std::vector<OpEvent>& events) {
  size_t total = 0;
  for (const auto& ops : s.worker_ops) total += ops.size();
  EXPECT_EQ(events.size(), total);
  for (int k = 0; k < s.num_workers; ++k) {
    std::vector<OpEvent> mine;
    for (const auto& e : events) {
      if (e.worker == k) mine.push_back(e);
    }
    std::sort(mine.begin(), mine.end(),
              [](const OpEvent& a, const OpEvent& b) { return a.start_seconds < b.start_seconds; });
    ASSERT_EQ(mine.size(), s.worker_ops[k].size()) << "worker " << k;
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].op, s.worker_ops[k][i]) << "worker " << k << " op " << i;  // program order
      EXPECT_LE(mine[i].start_seconds, mine[i].end_seconds);
      if (i > 0) EXPECT_LE(mine[i - 1].end_seconds, mine[i].start_seconds) << "overlap on worker " << k;
    }
  }
}

TEST(Trace, EmulatedExecutorOneEventPerOp) {
  const auto s = schedule::make_schedule(schedule::ScheduleKind::kStale, 3, 0, 6);
  const auto events = record("emulated", s);
  expect_one_event_per_op(s, events);
  // The emulator runs one op at a time: no two events overlap at all, in global order.
  const auto order = schedule::global_order(s);
  ASSERT_EQ(order.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].worker, order[i].worker);
    EXPECT_EQ(events[i].op, order[i].op);
    if (i > 0) EXPECT_LE(events[i - 1].end_seconds, events[i].start_seconds);
  }
}

TEST(Trace, ThreadsExecutorOneEventPerOp) {
  const auto s = schedule::make_schedule(schedule::ScheduleKind::kStale, 3, 0, 6);
  expect_one_event_per_op(s, record("threads", s));
}

TEST(Trace, ChromeJsonParsesAndSvgIsDrawn) {
  const auto s = schedule::make_schedule(schedule::ScheduleKind::kSequential, 3, 0, 2);
  const auto events = record("emulated", s);
  const auto json = nlohmann::json::parse(to_chrome_trace(events));
  int complete = 0;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++complete;
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      EXPECT_GE(e.at("tid").get<int>(), 1);
    }
  }
  EXPECT_EQ(complete, 3 * 3 * 2);
  EXPECT_EQ(json.at("traceEvents")[0].at("name"), schedule::to_string(events[0].op));
  const std::string svg = space_time_svg(events, 3, "test");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("worker 3"), std::string::npos);
}

}  // namespace
}  // namespace stalepipe::sim
