// The CLI's edge: flags <-> option-tree fields. Each stored field of the tree (the registry,
// api/option_fields.h) has one flag: its name with '-' for '_' (train_subset:
// --train-subset), but for a few exceptions (ppv: --pipeline, dataset: --data, algorithm:
// --optimizer), and its help is the registry's. The library names fields in its messages ("PipelineOptions::ppv 9:
// ..."); the CLI shows the flag instead ("--pipeline 9: ...").
#pragma once

#include <initializer_list>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "stalepipe/api/option_fields.h"

namespace stalepipe::cli {

// "--pipeline" for "PipelineOptions::ppv", "--train-subset" for "DataOptions::train_subset".
std::string flag_of(const std::string& part, const std::string& name);
std::string flag_of(Field field);

// `message` with every "Part::field" of an option struct the CLI has flags for replaced by
// the flag.
std::string with_flags(std::string message);

// Fields stored as text (a PPV, enums, devices, the hybrid switch, the loss) are taken as
// text and parsed when `apply` runs.
struct TrainFlags {
  std::map<Field, std::string> text;
};
// Registers `field` of `options` as a flag of `app`, with the registry's help unless `help`
// is given (defaults shown in --help).
CLI::Option* add_field_flag(CLI::App& app, Options& options, TrainFlags& text, Field field,
                            const std::string& help = "");
// Registers every stored field of the option tree that the CLI offers (all but
// segment_steps), and where a processes run's rank sits.
void add_option_flags(CLI::App& app, Options& options, TrainFlags& text);
// Parses the text fields into `options`; UsageError naming the field for a bad value.
void apply(const TrainFlags& text, Options& options);

// "lenet5 | alexnet | ... | unet": the zoo's names, for the help of a --model flag.
std::string zoo_model_choices();

// --micro-batches of `schedule` and `simulate`, which build a schedule without a whole run's
// check_options: at least 1, and more only for gpipe.
void check_micro_batches(int micro_batches, ScheduleKind kind);

}  // namespace stalepipe::cli
