#include "stalepipe/api/loader_source.h"

#include "stalepipe/common/error.h"

namespace stalepipe {

void LoaderSource::start_epoch(int64_t epoch, int64_t first) {
  prefetch_.reset();
  prefetch_.emplace(loader_, epoch, first, loader_.batches_per_epoch());
  next_index_ = first;
}

exec::Input LoaderSource::next() {
  auto batch = prefetch_->next();
  if (!batch) return {};
  SP_CHECK(batch->index == next_index_, "data loader out of step at batch ", next_index_);
  ++next_index_;
  return {batch->x, batch->y, batch->samples};
}

}  // namespace stalepipe
