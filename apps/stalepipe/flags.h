// The CLI's edge: flags <-> option-tree fields. The library names fields in its messages
// ("PipelineOptions::ppv 9: ..."); the CLI shows the flag instead ("--pipeline 9: ...").
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "stalepipe/api/options.h"

namespace stalepipe::cli {

// `message` with every field name of the table replaced by its flag.
std::string with_flags(std::string message);

// Registers every field of the option tree as a flag of `app` (defaults shown in --help).
// Fields given as text (PPV, devices, hybrid switch, enums) are parsed when `apply` runs.
struct TrainFlags {
  std::string ppv, devices, hybrid_switch, schedule, balance, executor, lr_schedule, progress, loss, layout;
};
void add_option_flags(CLI::App& app, Options& options, TrainFlags& text);
// Parses the text fields into `options`; UsageError naming the flag's field for a bad value.
void apply(const TrainFlags& text, Options& options);

}  // namespace stalepipe::cli
