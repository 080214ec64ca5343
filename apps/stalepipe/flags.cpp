#include "flags.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "stalepipe/common/error.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::cli {
namespace {

// The option tree's flags are its table's (options.h). Of the options outside it, those whose
// flag is not the field's name with dashes.
const std::pair<const char*, const char*> kOtherFlags[] = {
    {"SweepOptions::names", "--run"},
    {"SweepOptions::seeds", "--seed"},
    {"ExperimentOverrides::data", "sweep --data"},
};

// One field as a flag: a bool as a switch, a list comma-separated, text kept for `apply`.
template <typename T>
CLI::Option* add_flag_of(CLI::App& app, const OptionField& f, T& value, TrainFlags& text,
                         const std::string& help, const Options& options) {
  const std::string flag = flag_of(f.field);
  if (f.text) {
    std::string& t = text.text[f.field];
    t = f.write(options).template get<std::string>();
    return app.add_option(flag, t, help)->capture_default_str();
  }
  if constexpr (std::is_same_v<T, bool>) {
    return app.add_flag(flag, value, help);
  } else if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<double>>) {
    return app.add_option(flag, value, help)->delimiter(',');
  } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
    return app.add_option(flag, value, help)->capture_default_str();
  }
  throw std::logic_error(f.qualified() + ": a field of this type must be stored as text");
}

}  // namespace

std::string flag_of(const std::string& part, const std::string& name) {
  const std::string qualified = part + "::" + name;
  for (const OptionField& f : option_fields()) {
    if (f.qualified() == qualified) return flag_of(f.field);
  }
  for (const auto& [field, flag] : kOtherFlags) {
    if (qualified == field) return flag;
  }
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string flag_of(Field field) {
  const OptionField& f = option_field(field);
  return f.flag.empty() ? f.qualified() : f.flag;  // a field without a flag is named as in the API
}

std::string with_flags(std::string message) {
  return rename_fields(message, [](const std::string& part, const std::string& name) { return flag_of(part, name); });
}

CLI::Option* add_field_flag(CLI::App& app, Options& options, TrainFlags& text, Field field,
                            const std::string& help) {
  CLI::Option* added = nullptr;
  const Options before = options;
  for_each_option_field(options, [&](const OptionField& f, auto& value) {
    if (f.field == field) added = add_flag_of(app, f, value, text, with_flags(help.empty() ? f.help : help), before);
  });
  return added;
}

void add_option_flags(CLI::App& app, Options& o, TrainFlags& text) {
  for (const OptionField& f : option_fields()) {
    if (!f.flag.empty()) add_field_flag(app, o, text, f.field);
  }
  app.get_option(flag_of(Field::ppv))->excludes(app.get_option(flag_of(Field::partitions)));
  auto& g = o.pipeline().group();
  app.add_option("--rank", g.rank(), "processes: this process's rank (default $RANK)");
  app.add_option("--world-size", g.world_size(), "processes: number of ranks = partitions x replicas (default $WORLD_SIZE)");
  app.add_option("--master-addr", g.master_addr(), "processes: rank 0's address (default $MASTER_ADDR, else 127.0.0.1)");
  app.add_option("--master-port", g.master_port(), "processes: rendezvous port on rank 0 (default $MASTER_PORT, else 29500)");
  app.add_option("--timeout-seconds", g.timeout_seconds(), "processes: a rank that does not answer within this time ends the run")->capture_default_str();
}

void apply(const TrainFlags& text, Options& o) {
  for (const auto& [field, value] : text.text) option_field(field).read(value, o, field_name(field));
}

std::string zoo_model_choices() { return c10::Join(" | ", models::model_names()); }

void check_micro_batches(int micro_batches, ScheduleKind kind) {
  SP_CHECK_ARG(micro_batches >= 1, flag_of(Field::micro_batches), " must be >= 1, got ", micro_batches);
  SP_CHECK_ARG(micro_batches == 1 || kind == ScheduleKind::kGPipe, flag_of(Field::micro_batches), " ",
               micro_batches, " applies to --schedule gpipe only, not ", schedule::to_string(kind));
}

}  // namespace stalepipe::cli
