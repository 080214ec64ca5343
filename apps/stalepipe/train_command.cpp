// `stalepipe train`: every field of the option tree as a flag; Ctrl-C drains and checkpoints.
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "stalepipe/common/files.h"
#include "stalepipe/models/torchscript.h"
#include "stalepipe/train/stop_signals.h"
#include "stalepipe/train/trainer.h"

namespace stalepipe::cli {
namespace {

// --export FILE: the trained network as TorchScript. Checked before training, so that a
// mistake costs no run.
void check_export(const std::string& file, const Options& o, const std::string& resume) {
  if (file.empty()) return;
  const Options run = resume.empty() ? o : train::read_run_config(resume);
  SP_CHECK_ARG(!run.run().model_file().empty(), "--export ", file,
               " writes a model loaded with --model-file; ", run.run().model(), " is a zoo model");
  SP_CHECK_ARG(run.pipeline().executor() != ExecutorKind::kProcesses, "--export ", file,
               ": with --executor processes each rank holds only its own partition's weights; "
               "train with threads or emulated, or export from one of those");
  check_writable(file, "--export");
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<Options>();  // defaults: the option tree's
  auto text = std::make_shared<TrainFlags>();
  auto resume = std::make_shared<std::string>();
  auto export_file = std::make_shared<std::string>();
  add_option_flags(app, *o, *text);
  app.add_option("--resume", *resume, "continue the run in this directory from its last checkpoint (its config.json applies)");
  app.add_option("--export", *export_file, "after training, write the trained --model-file network as TorchScript to FILE (torch.jit.load reads it)");
  return [o, text, resume, export_file]() {
    apply(*text, *o);
    check_export(*export_file, *o, *resume);
    train::TrainHooks hooks;
    const train::StopSignals signals(/*sigterm_too=*/true);
    hooks.stop = &signals.stop();
    hooks.suspended_ns = &signals.suspended_ns();
    if (!export_file->empty()) {
      hooks.on_trained = [export_file](const PipelineTrainer& t) {
        models::save_torchscript(t.model(), *export_file);
        std::fprintf(stderr, "exported the trained network to %s\n", export_file->c_str());
      };
    }
    const auto result = resume->empty() ? train::train(*o, hooks)
                                        : train::resume(*resume, hooks, o->pipeline().group());
    if (result.interrupted) return 130;
    if (result.test_accuracy) {
      std::printf("test_accuracy %.4f\n", *result.test_accuracy);
    } else {
      std::printf("test_loss %.6f\n", result.test_loss);
    }
    return 0;
  };
}

}  // namespace stalepipe::cli
