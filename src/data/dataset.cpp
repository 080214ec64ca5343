#include "stalepipe/data/dataset.h"

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

int64_t image_dim(const Dataset& data, int64_t dim) {
  SP_CHECK_ARG(data.images.defined() && data.images.dim() == 4, "data set '", data.name,
      "': expected images of shape [N, C, H, W], found ",
      data.images.defined() ? c10::str(data.images.sizes()) : std::string("no images"));
  return data.images.size(dim);
}

}  // namespace

int64_t Dataset::size() const {
  return images.defined() ? images.size(0) : 0;
}

int64_t Dataset::channels() const {
  return image_dim(*this, 1);
}

int64_t Dataset::height() const {
  return image_dim(*this, 2);
}

int64_t Dataset::width() const {
  return image_dim(*this, 3);
}

Dataset Dataset::subset(int64_t n) const {
  SP_CHECK_ARG(n >= 0 && n <= size(), "subset of data set '", name, "': expected 0..", size(),
      " samples, got ", n);
  Dataset out = *this;
  if (images.defined()) {
    out.images = images.narrow(0, 0, n);
    out.labels = labels.narrow(0, 0, n);
  }
  return out;
}

}  // namespace data
}  // namespace stalepipe
