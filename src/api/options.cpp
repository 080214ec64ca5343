#include "stalepipe/api/options.h"

#include <cmath>
#include <thread>

#include "stalepipe/common/device.h"
#include "stalepipe/common/names.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe {
namespace {

const std::pair<ProgressMode, const char*> kProgressNames[] = {{ProgressMode::kAuto, "auto"},
                                                               {ProgressMode::kBar, "bar"},
                                                               {ProgressMode::kLines, "lines"},
                                                               {ProgressMode::kNone, "none"}};
const std::pair<Layout, const char*> kLayoutNames[] = {{Layout::kAuto, "auto"},
                                                       {Layout::kNchw, "nchw"},
                                                       {Layout::kChannelsLast, "channels-last"}};

void check_data(const DataOptions& o) {
  SP_CHECK_ARG(o.batch_size() >= 1, field_name(Field::batch_size), " must be >= 1, got ", o.batch_size());
  SP_CHECK_ARG(o.eval_batch_size() >= 1, field_name(Field::eval_batch_size), " must be >= 1, got ",
               o.eval_batch_size());
  SP_CHECK_ARG(o.train_subset() >= 0, field_name(Field::train_subset), " must be >= 0, got ", o.train_subset());
  SP_CHECK_ARG(o.test_subset() >= 0, field_name(Field::test_subset), " must be >= 0, got ", o.test_subset());
  SP_CHECK_ARG(o.image_size() >= 0, field_name(Field::image_size), " must be >= 0, got ", o.image_size());
  SP_CHECK_ARG(o.val_fraction() >= 0 && o.val_fraction() < 1, field_name(Field::val_fraction), " must be in [0, 1), got ",
               o.val_fraction());
  SP_CHECK_ARG(o.max_megapixels() > 0, field_name(Field::max_megapixels), " must be > 0, got ", o.max_megapixels());
  SP_CHECK_ARG(o.data_threads() >= 0, field_name(Field::data_threads), " must be >= 0, got ", o.data_threads());
  SP_CHECK_ARG(o.norm_mean().size() == o.norm_std().size(), field_name(Field::norm_mean), " and ",
               field_name(Field::norm_std), " go together, one value per channel: got ", o.norm_mean().size(), " and ",
               o.norm_std().size());
  for (double s : o.norm_std()) {
    SP_CHECK_ARG(s > 0, field_name(Field::norm_std), " must be > 0 for every channel, got ", s);
  }
}

void check_run(const RunOptions& o) {
  SP_CHECK_ARG(o.model_file().empty() || o.model() == RunOptions().model(), field_name(Field::model_file), " ",
               o.model_file(), " and ", field_name(Field::model), " ", o.model(), " name two models; give only one of them");
  SP_CHECK_ARG(o.epochs() >= 1, field_name(Field::epochs), " must be >= 1, got ", o.epochs());
  SP_CHECK_ARG(o.max_steps() >= 0, field_name(Field::max_steps), " must be >= 0, got ", o.max_steps());
  SP_CHECK_ARG(o.stop_at_step() >= 0, field_name(Field::stop_at_step), " must be >= 0, got ", o.stop_at_step());
  SP_CHECK_ARG(o.checkpoint_every() >= 0, field_name(Field::checkpoint_every), " must be >= 0, got ",
               o.checkpoint_every());
  SP_CHECK_ARG(o.eval_every() >= 0, field_name(Field::eval_every), " must be >= 0, got ", o.eval_every());
  for (double target : o.targets()) {
    SP_CHECK_ARG(target > 0 && target <= 100, field_name(Field::targets), " must be accuracies in (0, 100] %, got ", target);
  }
  SP_CHECK_ARG(o.dropout() >= 0 && o.dropout() < 1, field_name(Field::dropout), " must be in [0, 1), got ", o.dropout());
  SP_CHECK_ARG(o.dropout() == 0 || o.model_file().empty(), field_name(Field::dropout), " places dropout in a zoo network; "
               "the model file ", o.model_file(), " brings its own");
}

// The rule (sgd or adamw), its own hyperparameters, and the mitigations that act on SGD's
// momentum.
void check_update_rule(const OptimizerOptions& o) {
  const OptimizerOptions defaults;
  const std::string rule = c10::str(field_name(Field::algorithm), " ", optim::to_string(o.algorithm()));
  SP_CHECK_ARG(o.betas().empty() || o.betas().size() == 2, field_name(Field::betas),
               " takes two rates, beta1,beta2; got ", o.betas().size());
  for (double beta : o.betas()) {
    SP_CHECK_ARG(beta >= 0 && beta < 1, field_name(Field::betas), " must each lie in [0, 1), got ", beta);
  }
  SP_CHECK_ARG(o.eps() > 0, field_name(Field::eps), " must be > 0, got ", o.eps());
  if (o.algorithm() == OptimizerKind::kAdamW) {
    SP_CHECK_ARG(o.momentum() == defaults.momentum(), field_name(Field::momentum), " ", o.momentum(),
                 " is SGD's; under ", rule, " the first moment decays at beta1 (", field_name(Field::betas), ")");
    const std::pair<Field, bool> of_momentum[] = {{Field::nesterov, o.nesterov()},
                                                  {Field::spike_compensation, o.spike_compensation()},
                                                  {Field::weight_prediction, o.weight_prediction()},
                                                  {Field::delay_nesterov, o.delay_nesterov()}};
    for (const auto& [field, set] : of_momentum) {
      SP_CHECK_ARG(!set, field_name(field), " acts on SGD's momentum; ", rule, " has none");
    }
  } else {
    SP_CHECK_ARG(o.betas().empty(), field_name(Field::betas), " applies to adamw, not ", rule);
    SP_CHECK_ARG(o.eps() == defaults.eps(), field_name(Field::eps), " applies to adamw, not ", rule);
  }
  SP_CHECK_ARG(!o.delay_nesterov() || (o.momentum() > 0 && o.momentum() < 1), field_name(Field::delay_nesterov),
               " looks ahead along the momentum; it needs momentum between 0 and 1, got ", o.momentum());
  SP_CHECK_ARG(!o.delay_nesterov() || (!o.weight_prediction() && !o.spike_compensation()),
               field_name(Field::delay_nesterov), " moves the look-ahead itself; it does not combine with ",
               field_name(o.weight_prediction() ? Field::weight_prediction : Field::spike_compensation));
}

void check_optimizer(const OptimizerOptions& o) {
  SP_CHECK_ARG(o.lr() > 0 && std::isfinite(o.lr()), field_name(Field::lr), " must be a positive number, got ", o.lr());
  SP_CHECK_ARG(o.momentum() >= 0, field_name(Field::momentum), " must be >= 0, got ", o.momentum());
  SP_CHECK_ARG(o.weight_decay() >= 0, field_name(Field::weight_decay), " must be >= 0, got ", o.weight_decay());
  SP_CHECK_ARG(o.lr_gamma() > 0, field_name(Field::lr_gamma), " must be > 0, got ", o.lr_gamma());
  SP_CHECK_ARG(o.warmup_epochs() >= 0, field_name(Field::warmup_epochs), " must be >= 0, got ", o.warmup_epochs());
  SP_CHECK_ARG(o.delay_lr_anneal_epochs() >= 0, field_name(Field::delay_lr_anneal_epochs), " must be >= 0, got ",
               o.delay_lr_anneal_epochs());
  SP_CHECK_ARG(o.delay_aware_lr() || o.delay_lr_anneal_epochs() == 0,
               field_name(Field::delay_lr_anneal_epochs), " needs delay_aware_lr");
  SP_CHECK_ARG(!o.weight_prediction() || o.momentum() > 0,
               field_name(Field::weight_prediction), " extrapolates along the momentum; it needs momentum > 0");
  SP_CHECK_ARG(!o.spike_compensation() || (!o.nesterov() && o.momentum() < 1), field_name(Field::spike_compensation),
               " needs plain momentum below 1 (not nesterov), got momentum ", o.momentum(),
               o.nesterov() ? " with nesterov" : "");
  check_update_rule(o);
  const auto& milestones = o.lr_milestones();
  for (size_t i = 0; i < milestones.size(); ++i) {
    SP_CHECK_ARG(milestones[i] > 0 && (i == 0 || milestones[i] > milestones[i - 1]), field_name(Field::lr_milestones),
                 " must be increasing positive epochs, got ", milestones[i], i == 0 ? "" : " after ",
                 i == 0 ? std::string() : std::to_string(milestones[i - 1]));
  }
}

void check_pipeline(const PipelineOptions& o, int64_t batch_size) {
  const bool hybrid = o.schedule() == ScheduleKind::kHybrid;
  SP_CHECK_ARG(o.partitions() >= 0, field_name(Field::partitions), " must be >= 0, got ", o.partitions());
  // A balanced run's config.json holds both, the PPV it chose and K.
  SP_CHECK_ARG(o.partitions() == 0 || o.ppv().empty() || static_cast<int>(o.ppv().size()) + 1 == o.partitions(),
               field_name(Field::partitions), " ", o.partitions(), " and ppv ", partition::format_ppv(o.ppv()),
               " disagree; give only one of them");
  SP_CHECK_ARG(o.profile_batch() >= 0, field_name(Field::profile_batch), " must be >= 0, got ", o.profile_batch());
  SP_CHECK_ARG(o.micro_batches() >= 1, field_name(Field::micro_batches), " must be >= 1, got ", o.micro_batches());
  SP_CHECK_ARG(o.micro_batches() == 1 || o.schedule() == ScheduleKind::kGPipe,
               field_name(Field::micro_batches), " ", o.micro_batches(), " applies to schedule gpipe only, not ",
               schedule::to_string(o.schedule()));
  SP_CHECK_ARG(o.micro_batches() <= batch_size, field_name(Field::micro_batches), " ", o.micro_batches(),
               ": more micro-batches than the batch size of ", batch_size);
  SP_CHECK_ARG(o.replicas() >= 1, field_name(Field::replicas), " must be >= 1, got ", o.replicas());
  SP_CHECK_ARG(o.replicas() * static_cast<int64_t>(o.micro_batches()) <= batch_size, field_name(Field::replicas), " ",
               o.replicas(), " x ", o.micro_batches(), " micro-batch(es): more slices than the batch size of ", batch_size);
  SP_CHECK_ARG(!hybrid || o.hybrid_switch().set(),
               field_name(Field::schedule), " hybrid needs hybrid_switch (epochs, or steps)");
  SP_CHECK_ARG(hybrid || !o.hybrid_switch().set(), field_name(Field::hybrid_switch), " needs schedule hybrid");
  SP_CHECK_ARG(hybrid || !o.hybrid_norm_reset(), field_name(Field::hybrid_norm_reset), " needs schedule hybrid");
  SP_CHECK_ARG(o.threads() >= 0, field_name(Field::threads), " must be >= 0, got ", o.threads());
  SP_CHECK_ARG(o.threads_per_worker() >= 0, field_name(Field::threads_per_worker), " must be >= 0, got ",
               o.threads_per_worker());
  SP_CHECK_ARG(o.recompute() >= 0, field_name(Field::recompute), " must be a weight layer (>= 0; 0: none), got ",
               o.recompute());
  SP_CHECK_ARG(o.segment_steps() >= 1, field_name(Field::segment_steps), " must be >= 1, got ", o.segment_steps());
  for (const auto& d : o.devices()) check_device(d, field_name(Field::devices));
}

// CUDA graphs, refused before any training where they cannot work (exec::Stage::use_graphs
// checks the same of each partition it is given).
void check_graphs(const Options& options) {
  const PipelineOptions& o = options.pipeline();
  if (!o.cuda_graphs()) return;
  const std::string& name = field_name(Field::cuda_graphs);
  SP_CHECK_ARG(options.optimizer().algorithm() == OptimizerKind::kSgd, name, " and ", field_name(Field::algorithm),
               " adamw do not combine: the graphs capture SGD's update only");
  SP_CHECK_ARG(o.recompute() == 0, name, " and ", field_name(Field::recompute),
               " do not combine: a replayed backward does not recompute");
  SP_CHECK_ARG(options.run().dropout() == 0, name, " and ", field_name(Field::dropout), " ", options.run().dropout(),
               " do not combine: dropout masks are drawn on the host, and a replay would repeat them");
  SP_CHECK_ARG(o.replicas() == 1, name, " and ", field_name(Field::replicas), " ", o.replicas(),
               " do not combine: the replicas' gradient sum replaces the gradients a graph accumulates into");
  SP_CHECK_ARG(!o.devices().empty(), name, ": partition 1 runs on cpu (", field_name(Field::devices),
               " is not set); CUDA graphs need CUDA devices");
  for (size_t k = 0; k < o.devices().size(); ++k) {
    SP_CHECK_ARG(o.devices()[k].is_cuda(), name, ": partition ", k + 1, " runs on ", o.devices()[k].str(),
                 "; CUDA graphs need CUDA devices");
  }
}

}  // namespace

void check_options(const Options& options) {
  check_data(options.data());
  check_run(options.run());
  check_optimizer(options.optimizer());
  // The look-ahead assumes one weight copy: a stashed forward already sees old weights.
  SP_CHECK_ARG(!options.optimizer().delay_nesterov() || options.pipeline().schedule() != ScheduleKind::kOneFOneB,
               field_name(Field::delay_nesterov), " and ", field_name(Field::schedule),
               " 1f1b-stash do not combine: the look-ahead stands in for the stashed weights");
  check_pipeline(options.pipeline(), options.data().batch_size());
  check_graphs(options);
}

std::string to_string(ProgressMode mode) { return name_of(kProgressNames, mode); }

ProgressMode progress_from_name(const std::string& name, const std::string& field) {
  return value_of(kProgressNames, name, field);
}

std::string to_string(Layout layout) { return name_of(kLayoutNames, layout); }

Layout layout_from_name(const std::string& name, const std::string& field) {
  return value_of(kLayoutNames, name, field);
}

Layout resolved_layout(Layout asked, const std::string& zoo_model) {
  if (asked != Layout::kAuto) return asked;
  return models::prefers_channels_last(zoo_model) ? Layout::kChannelsLast : Layout::kNchw;
}

Layout resolved_layout(const Options& options) {
  const RunOptions& run = options.run();
  return resolved_layout(options.pipeline().layout(), run.model_file().empty() ? run.model() : "");
}

int resolved_threads(const PipelineOptions& o) {
  return o.threads() > 0 ? o.threads() : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int threads_per_worker(const PipelineOptions& o, int partitions) {
  return o.threads_per_worker() > 0 ? o.threads_per_worker()
                                    : std::max(1, resolved_threads(o) / (std::max(1, partitions) * o.replicas()));
}

int own_replica(const PipelineOptions& o) {
  if (o.executor() != ExecutorKind::kProcesses || o.replicas() == 1) return 0;
  const auto where = o.group().resolved();
  SP_CHECK_ARG(where.world_size() % o.replicas() == 0, field_name(Field::replicas), " ", o.replicas(),
               ": ProcessGroupOptions::world_size ", where.world_size(), " is not a multiple of it; start replicas x "
               "partitions ranks");
  return where.rank() / (where.world_size() / o.replicas());
}

}  // namespace stalepipe
