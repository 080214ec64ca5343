// The subcommands of the `stalepipe` program. Each add_* registers its options on `app` and
// returns the function that runs it (exit status: 0 ok, 1 runtime failure, 2 usage error).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace stalepipe::cli {

using Command = std::function<int()>;

Command add_train(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_layers(CLI::App& app);
Command add_schedule(CLI::App& app);
Command add_sweep(CLI::App& app);
Command add_launch(CLI::App& app);
Command add_profile(CLI::App& app);
Command add_simulate(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_memory(CLI::App& app);
Command add_data(CLI::App& app);

}  // namespace stalepipe::cli
