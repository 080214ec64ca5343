#include "stalepipe/api/loader_source.h"

#include "stalepipe/common/error.h"

namespace stalepipe {

LoaderSource::LoaderSource(const data::Loader& loader, torch::Device device, int ahead)
    : loader_(loader), device_(device), ahead_(static_cast<size_t>(ahead)) {
  SP_CHECK_ARG(ahead >= 0, "LoaderSource: ahead must be >= 0, got ", ahead);
  copies_ = exec::make_stream(device);
  if (loader.options().raw_pixels()) normalize_ = loader.normalizer().on(device);
}

void LoaderSource::start_epoch(int64_t epoch, int64_t first) {
  read_.clear();
  prefetch_.reset();
  prefetch_.emplace(loader_, epoch, first, loader_.batches_per_epoch());
  next_index_ = first;
}

LoaderSource::Ahead LoaderSource::fetch() {
  std::optional<data::Batch> batch;
  try {
    batch = prefetch_->next();
  } catch (...) {
    return {{}, std::current_exception()};
  }
  if (!batch) return {};
  SP_CHECK(batch->index == next_index_, "data loader out of step at batch ", next_index_);
  ++next_index_;
  exec::Input in{batch->x, batch->y, batch->samples};
  const auto on_stream = copies_->enter();
  // On a GPU, asynchronous from page-locked memory; the caching host allocator keeps the host
  // block until the copy is done. On the CPU the copies are the tensors themselves.
  in.x = in.x.to(device_, /*non_blocking=*/true);
  in.target = in.target.to(device_, /*non_blocking=*/true);
  if (normalize_) in.x = (*normalize_)(in.x);
  in.ready = copies_->record();
  return {std::move(in), nullptr};
}

exec::Input LoaderSource::next() {
  // Up to `ahead` batches beyond the one returned, never past the epoch's end or an error.
  while (read_.size() <= ahead_ && (read_.empty() || (read_.back().input.x.defined() && !read_.back().error))) {
    read_.push_back(fetch());
  }
  Ahead front = std::move(read_.front());
  read_.pop_front();
  if (front.error) std::rethrow_exception(front.error);
  return std::move(front.input);
}

}  // namespace stalepipe
