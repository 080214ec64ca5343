// `stalepipe train`: every TrainOptions field as a flag; Ctrl-C drains and checkpoints.
#include <atomic>
#include <csignal>
#include <cstdio>

#include "commands.h"
#include "stalepipe/train/trainer.h"

namespace stalepipe::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_interrupt(int) {
  if (g_stop.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
    std::raise(SIGINT);
  }
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  auto resume = std::make_shared<std::string>();
  auto milestones = std::make_shared<std::vector<int>>();
  auto group = std::make_shared<exec::ProcessGroupOptions>();
  // Defaults come from TrainOptions; CLI11 shows them in --help.
  app.add_option("--model", o->model(), "lenet5 | alexnet | vgg16 | resnet<6n+2> (resnet20, resnet56, ...)")->capture_default_str();
  app.add_option("--data", o->data(), "fashion-mnist[:DIR] | mnist:DIR | kmnist:DIR | cifar10:DIR | synthetic[:N]")->capture_default_str();
  app.add_option("--epochs", o->epochs(), "training epochs")->capture_default_str();
  app.add_option("--max-steps", o->max_steps(), "stop after this many mini-batches (0: no limit)")->capture_default_str();
  app.add_option("--batch-size", o->batch_size(), "mini-batch size")->capture_default_str();
  app.add_option("--lr", o->lr(), "base learning rate")->capture_default_str();
  app.add_option("--momentum", o->momentum(), "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o->weight_decay(), "L2 weight decay")->capture_default_str();
  app.add_flag("--nesterov", o->nesterov(), "Nesterov momentum");
  app.add_option("--lr-schedule", o->lr_schedule(), "constant | step | cosine")->capture_default_str();
  app.add_option("--lr-milestones", *milestones, "epochs at which the step schedule multiplies lr by --lr-gamma")->delimiter(',');
  app.add_option("--lr-gamma", o->lr_gamma(), "step schedule factor")->capture_default_str();
  app.add_option("--warmup-epochs", o->warmup_epochs(), "linear learning-rate warm-up (may be fractional)")->capture_default_str();
  app.add_option("--seed", o->seed(), "seed for initialisation, shuffling and augmentation")->capture_default_str();
  app.add_option("--train-subset", o->train_subset(), "train on the first N samples (0: all)")->capture_default_str();
  app.add_option("--test-subset", o->test_subset(), "evaluate on the first N test samples (0: all)")->capture_default_str();
  app.add_flag("--augment", o->augment(), "random 4-pixel-padded crop and horizontal flip");
  app.add_flag("--drop-last", o->drop_last(), "drop the last partial batch of each epoch");
  auto* pipeline = app.add_option("--pipeline", o->pipeline(), "PPV: weight layers followed by a register, e.g. 2 or 7,13; none = no pipeline")->capture_default_str();
  auto* partitions = app.add_option("--partitions", o->partitions(), "K partitions with a balanced PPV (instead of --pipeline)");
  pipeline->excludes(partitions);
  app.add_option("--balance", o->balance(), "with --partitions: balance time (quick profile first) | params | flops")->capture_default_str();
  app.add_option("--schedule", o->schedule(), "stale (PPL-SGD) | sequential | hybrid | gpipe | 1f1b-stash (PipeDream)")->capture_default_str();
  app.add_option("--hybrid-switch", o->hybrid_switch(), "hybrid: switch to sequential after N epochs, or Ns steps (e.g. 3 or 500s)");
  app.add_flag("--hybrid-norm-reset", o->hybrid_norm_reset(), "hybrid: at the switch, weights that feed a batch norm get back their initial norm");
  app.add_option("--micro-batches", o->micro_batches(), "gpipe: micro-batches per mini-batch")->capture_default_str();
  app.add_flag("--delay-aware-lr", o->delay_aware_lr(), "mitigation: lr * (1+D)^-p for a gradient D updates stale (PipeMare)");
  app.add_option("--delay-lr-anneal-epochs", o->delay_lr_anneal_epochs(), "with --delay-aware-lr: p falls from 1 to 0 over these epochs (0: p = 1 throughout)")->capture_default_str();
  app.add_flag("--weight-prediction", o->weight_prediction(), "mitigation: forwards use weights extrapolated D updates ahead along the momentum");
  app.add_flag("--spike-compensation", o->spike_compensation(), "mitigation: momentum spike compensation for delayed gradients (Kosson et al.)");
  app.add_flag("--fixed-weight-norm", o->fixed_weight_norm(), "mitigation: weights that feed a batch norm keep their initial norm (stale gradients inflate it)");
  app.add_option("--executor", o->executor(), "emulated (reference, one thread) | threads (one thread per partition) | processes (one rank per partition; see launch)")->capture_default_str();
  app.add_option("--devices", o->devices(), "one device per partition, e.g. cpu,cpu or cuda:0,cuda:1 (default: cpu)");
  app.add_option("--threads", o->threads(), "intra-op threads in all (0: all cores)")->capture_default_str();
  app.add_option("--threads-per-worker", o->threads_per_worker(), "intra-op threads per partition (0: threads / partitions)")->capture_default_str();
  app.add_option("--out", o->out(), "run directory: config.json, metrics.jsonl, summary.json, checkpoint/");
  app.add_option("--resume", *resume, "continue the run in this directory from its last checkpoint (its config.json applies)");
  app.add_option("--checkpoint-every", o->checkpoint_every(), "also checkpoint every N steps (0: at epoch ends only)")->capture_default_str();
  app.add_option("--eval-batch-size", o->eval_batch_size(), "batch size for evaluation")->capture_default_str();
  app.add_option("--progress", o->progress(), "auto | bar | lines | none")->capture_default_str();
  app.add_option("--trace", o->trace(), "write a Chrome trace (Perfetto) of every op to FILE and its space-time SVG to FILE.svg");

  // --executor processes: torchrun's environment variables, or these flags.
  app.add_option("--rank", group->rank(), "processes: this process's rank (default $RANK)");
  app.add_option("--world-size", group->world_size(), "processes: number of ranks = partitions (default $WORLD_SIZE)");
  app.add_option("--master-addr", group->master_addr(), "processes: rank 0's address (default $MASTER_ADDR, else 127.0.0.1)");
  app.add_option("--master-port", group->master_port(), "processes: rendezvous port on rank 0 (default $MASTER_PORT, else 29500)");
  app.add_option("--timeout-seconds", group->timeout_seconds(), "processes: a rank that does not answer within this time ends the run")->capture_default_str();

  return [o, resume, milestones, group]() {
    o->lr_milestones(*milestones);
    g_stop = false;
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    train::TrainHooks hooks;
    hooks.stop = &g_stop;
    hooks.process_group = *group;
    const auto result = resume->empty() ? train::train(*o, hooks) : train::resume(*resume, hooks);
    if (result.interrupted) return 130;
    std::printf("test_accuracy %.4f\n", result.test_accuracy);
    return 0;
  };
}

}  // namespace stalepipe::cli
