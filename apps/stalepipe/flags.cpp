#include "flags.h"

#include <utility>

#include "stalepipe/api/options_json.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::cli {
namespace {

// Every field a message may name, with its flag. Longer names first where one is the prefix
// of another (delay_lr_anneal_epochs before lr).
const std::pair<const char*, const char*> kFlags[] = {
    {"DataOptions::dataset", "--data"},
    {"DataOptions::train_subset", "--train-subset"},
    {"DataOptions::test_subset", "--test-subset"},
    {"DataOptions::augment", "--augment"},
    {"DataOptions::drop_last", "--drop-last"},
    {"DataOptions::batch_size", "--batch-size"},
    {"DataOptions::eval_batch_size", "--eval-batch-size"},
    {"PipelineOptions::ppv", "--pipeline"},
    {"PipelineOptions::partitions", "--partitions"},
    {"PipelineOptions::balance", "--balance"},
    {"PipelineOptions::profile_batch", "--profile-batch"},
    {"PipelineOptions::schedule", "--schedule"},
    {"PipelineOptions::hybrid_switch", "--hybrid-switch"},
    {"PipelineOptions::hybrid_norm_reset", "--hybrid-norm-reset"},
    {"PipelineOptions::micro_batches", "--micro-batches"},
    {"PipelineOptions::executor", "--executor"},
    {"PipelineOptions::devices", "--devices"},
    {"PipelineOptions::threads_per_worker", "--threads-per-worker"},
    {"PipelineOptions::threads", "--threads"},
    {"OptimizerOptions::delay_lr_anneal_epochs", "--delay-lr-anneal-epochs"},
    {"OptimizerOptions::delay_aware_lr", "--delay-aware-lr"},
    {"OptimizerOptions::lr_schedule", "--lr-schedule"},
    {"OptimizerOptions::lr_milestones", "--lr-milestones"},
    {"OptimizerOptions::lr_gamma", "--lr-gamma"},
    {"OptimizerOptions::lr", "--lr"},
    {"OptimizerOptions::momentum", "--momentum"},
    {"OptimizerOptions::weight_decay", "--weight-decay"},
    {"OptimizerOptions::nesterov", "--nesterov"},
    {"OptimizerOptions::warmup_epochs", "--warmup-epochs"},
    {"OptimizerOptions::weight_prediction", "--weight-prediction"},
    {"OptimizerOptions::spike_compensation", "--spike-compensation"},
    {"OptimizerOptions::fixed_weight_norm", "--fixed-weight-norm"},
    {"OptimizerOptions::loss", "--loss"},
    {"RunOptions::model_file", "--model-file"},
    {"RunOptions::model", "--model"},
    {"RunOptions::dropout", "--dropout"},
    {"RunOptions::epochs", "--epochs"},
    {"RunOptions::max_steps", "--max-steps"},
    {"RunOptions::stop_at_step", "--stop-at-step"},
    {"RunOptions::seed", "--seed"},
    {"RunOptions::out", "--out"},
    {"RunOptions::checkpoint_every", "--checkpoint-every"},
    {"RunOptions::eval_every", "--eval-every"},
    {"PipelineOptions::layout", "--layout"},
    {"PipelineOptions::recompute", "--recompute"},
    {"RunOptions::targets", "--targets"},
    {"RunOptions::progress", "--progress"},
    {"RunOptions::trace", "--trace"},
    {"ProcessGroupOptions::world_size", "--world-size"},
    {"ProcessGroupOptions::rank", "--rank"},
    {"ProcessGroupOptions::master_addr", "--master-addr"},
    {"ProcessGroupOptions::master_port", "--master-port"},
    {"ProcessGroupOptions::timeout_seconds", "--timeout-seconds"},
    {"BenchOptions::ppv", "--pipeline"},
    {"BenchOptions::partitions", "--partitions"},
    {"BenchOptions::batch_size", "--batch-size"},
    {"BenchOptions::channels", "--channels"},
    {"BenchOptions::warmup_steps", "--warmup-steps"},
    {"BenchOptions::steps", "--steps"},
    {"BenchOptions::threads", "--threads"},
    {"BenchOptions::rounds", "--rounds"},
    {"BenchOptions::recompute", "--recompute"},
    {"MemoryOptions::recompute", "--recompute"},
    {"MemoryOptions::ppv", "--pipeline"},
    {"MemoryOptions::batch_size", "--batch-size"},
    {"MemoryOptions::channels", "--channels"},
    {"SweepOptions::names", "--run"},
    {"ExperimentOverrides::data", "sweep --data"},
    {"ExperimentOverrides::out", "--out"},
    {"ProfileOptions::batch_size", "--batch-size"},
    {"ProfileOptions::repeats", "--repeats"},
    {"ProfileOptions::warmup", "--warmup"},
    {"ProfileOptions::threads", "--threads"},
};

}  // namespace

std::string with_flags(std::string message) {
  for (const auto& [field, flag] : kFlags) {
    const std::string name = field;
    for (size_t at = message.find(name); at != std::string::npos; at = message.find(name, at)) {
      message.replace(at, name.size(), flag);
      at += std::string(flag).size();
    }
  }
  return message;
}

void add_option_flags(CLI::App& app, Options& o, TrainFlags& text) {
  DataOptions& d = o.data();
  PipelineOptions& p = o.pipeline();
  OptimizerOptions& z = o.optimizer();
  RunOptions& r = o.run();
  text.ppv = partition::format_ppv(p.ppv());
  text.schedule = schedule::to_string(p.schedule());
  text.balance = partition::to_string(p.balance());
  text.executor = exec::to_string(p.executor());
  text.lr_schedule = optim::to_string(z.lr_schedule());
  text.loss = z.loss().name();
  text.progress = to_string(r.progress());
  text.layout = to_string(p.layout());
  app.add_option("--model", r.model(), "lenet5 | alexnet | vgg16 | resnet<6n+2> (resnet20, resnet56, ...)")->capture_default_str();
  app.add_option("--dropout", r.dropout(), "alexnet, vgg16: dropout probability before each hidden fc layer (0: none)")->capture_default_str();
  app.add_option("--model-file", r.model_file(), "a TorchScript file saved by PyTorch 1.13 (instead of --model): a scripted torch.nn.Sequential, each child a unit; input C x 32 x 32")->capture_default_str();
  app.add_option("--data", d.dataset(), "fashion-mnist[:DIR] | mnist:DIR | kmnist:DIR | cifar10:DIR | synthetic[:N] | synthetic-regression[:N]")->capture_default_str();
  app.add_option("--epochs", r.epochs(), "training epochs")->capture_default_str();
  app.add_option("--max-steps", r.max_steps(), "end after this many mini-batches (0: no limit)")->capture_default_str();
  app.add_option("--stop-at-step", r.stop_at_step(), "stop as if interrupted (checkpoint, resumable) after this many mini-batches (0: never)")->capture_default_str();
  app.add_option("--batch-size", d.batch_size(), "mini-batch size")->capture_default_str();
  app.add_option("--lr", z.lr(), "base learning rate")->capture_default_str();
  app.add_option("--momentum", z.momentum(), "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", z.weight_decay(), "L2 weight decay")->capture_default_str();
  app.add_flag("--nesterov", z.nesterov(), "Nesterov momentum");
  app.add_option("--lr-schedule", text.lr_schedule, "constant | step | cosine")->capture_default_str();
  app.add_option("--loss", text.loss, "cross-entropy | nll (log-probabilities) | mse | l1 | smooth-l1 | bce-with-logits")->capture_default_str();
  app.add_option("--lr-milestones", z.lr_milestones(), "epochs at which the step schedule multiplies lr by --lr-gamma")->delimiter(',');
  app.add_option("--lr-gamma", z.lr_gamma(), "step schedule factor")->capture_default_str();
  app.add_option("--warmup-epochs", z.warmup_epochs(), "linear learning-rate warm-up (may be fractional)")->capture_default_str();
  app.add_option("--seed", r.seed(), "seed for initialisation, shuffling and augmentation")->capture_default_str();
  app.add_option("--train-subset", d.train_subset(), "train on the first N samples (0: all)")->capture_default_str();
  app.add_option("--test-subset", d.test_subset(), "evaluate on the first N test samples (0: all)")->capture_default_str();
  app.add_flag("--augment", d.augment(), "random 4-pixel-padded crop and horizontal flip");
  app.add_flag("--drop-last", d.drop_last(), "drop the last partial batch of each epoch");
  auto* pipeline = app.add_option("--pipeline", text.ppv, "PPV: weight layers followed by a register, e.g. 2 or 7,13; none = no pipeline")->capture_default_str();
  auto* partitions = app.add_option("--partitions", p.partitions(), "K partitions with a balanced PPV (instead of --pipeline)");
  pipeline->excludes(partitions);
  app.add_option("--balance", text.balance, "with --partitions: balance time (quick profile first) | params | flops")->capture_default_str();
  app.add_option("--profile-batch", p.profile_batch(), "with --balance time: samples per profiled step (0: --batch-size)")->capture_default_str();
  app.add_option("--schedule", text.schedule, "stale (PPL-SGD) | sequential | hybrid | gpipe | 1f1b-stash (PipeDream)")->capture_default_str();
  app.add_option("--hybrid-switch", text.hybrid_switch, "hybrid: switch to sequential after N epochs, or Ns steps (e.g. 3 or 500s)");
  app.add_flag("--hybrid-norm-reset", p.hybrid_norm_reset(), "hybrid: at the switch, weights that feed a batch norm get back their initial norm");
  app.add_option("--micro-batches", p.micro_batches(), "gpipe: micro-batches per mini-batch")->capture_default_str();
  app.add_flag("--delay-aware-lr", z.delay_aware_lr(), "mitigation: lr * (1+D)^-p for a gradient D updates stale (PipeMare)");
  app.add_option("--delay-lr-anneal-epochs", z.delay_lr_anneal_epochs(), "with --delay-aware-lr: p falls from 1 to 0 over these epochs (0: p = 1 throughout)")->capture_default_str();
  app.add_flag("--weight-prediction", z.weight_prediction(), "mitigation: forwards use weights extrapolated D updates ahead along the momentum");
  app.add_flag("--spike-compensation", z.spike_compensation(), "mitigation: momentum spike compensation for delayed gradients (Kosson et al.)");
  app.add_flag("--fixed-weight-norm", z.fixed_weight_norm(), "mitigation: weights that feed a batch norm keep their initial norm (stale gradients inflate it)");
  app.add_option("--executor", text.executor, "emulated (reference, one thread) | threads (one thread per partition) | processes (one rank per partition; see launch)")->capture_default_str();
  app.add_option("--devices", text.devices, "one device per partition, e.g. cpu,cpu or cuda:0,cuda:1 (default: cpu)");
  app.add_option("--threads", p.threads(), "intra-op threads in all (0: all cores)")->capture_default_str();
  app.add_option("--layout", text.layout, "weights, activations and registers in nchw | channels-last | auto (the faster for the model, as measured)")->capture_default_str();
  app.add_option("--recompute", p.recompute(), "recompute activations in backward through weight layer L (a position a register could follow; 0: none): less memory, same weights, one more forward of those layers")->capture_default_str();
  app.add_option("--threads-per-worker", p.threads_per_worker(), "intra-op threads per partition (0: threads / partitions)")->capture_default_str();
  app.add_option("--out", r.out(), "run directory: config.json, metrics.jsonl, summary.json, checkpoint/");
  app.add_option("--checkpoint-every", r.checkpoint_every(), "also checkpoint every N steps (0: at epoch ends only)")->capture_default_str();
  app.add_option("--eval-every", r.eval_every(), "also evaluate on the test set every N steps, for accuracy against training time (0: at epoch ends only)")->capture_default_str();
  app.add_option("--targets", r.targets(), "test accuracies (%) whose first training time summary.json reports, e.g. 85,90,92")->delimiter(',');
  app.add_option("--eval-batch-size", d.eval_batch_size(), "batch size for evaluation")->capture_default_str();
  app.add_option("--progress", text.progress, "auto | bar | lines | none")->capture_default_str();
  app.add_option("--trace", r.trace(), "write a Chrome trace (Perfetto) of every op to FILE and its space-time SVG to FILE.svg");
  auto& g = p.group();
  app.add_option("--rank", g.rank(), "processes: this process's rank (default $RANK)");
  app.add_option("--world-size", g.world_size(), "processes: number of ranks = partitions (default $WORLD_SIZE)");
  app.add_option("--master-addr", g.master_addr(), "processes: rank 0's address (default $MASTER_ADDR, else 127.0.0.1)");
  app.add_option("--master-port", g.master_port(), "processes: rendezvous port on rank 0 (default $MASTER_PORT, else 29500)");
  app.add_option("--timeout-seconds", g.timeout_seconds(), "processes: a rank that does not answer within this time ends the run")->capture_default_str();
}

void apply(const TrainFlags& text, Options& o) {
  o.pipeline().ppv(partition::parse_ppv(text.ppv));
  o.pipeline().devices(devices_from_text(text.devices, "PipelineOptions::devices"));
  o.pipeline().hybrid_switch(training_point_from_text(text.hybrid_switch, "PipelineOptions::hybrid_switch"));
  o.pipeline().schedule(schedule::schedule_from_name(text.schedule));
  o.pipeline().balance(partition::balance_from_name(text.balance));
  o.pipeline().executor(exec::executor_from_name(text.executor));
  o.optimizer().lr_schedule(optim::lr_schedule_from_name(text.lr_schedule));
  o.optimizer().loss(exec::Loss(text.loss));
  o.run().progress(progress_from_name(text.progress));
  o.pipeline().layout(layout_from_name(text.layout));
}

}  // namespace stalepipe::cli
