#include "stalepipe/data/source.h"

#include "data/decode_pool_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

// The first n samples of another source.
class FirstSamples : public SampleSource {
 public:
  FirstSamples(std::shared_ptr<const SampleSource> source, int64_t n)
      : source_(std::move(source)), n_(n), targets_(source_->targets().narrow(0, 0, n)) {}
  const std::string& name() const override { return source_->name(); }
  int64_t size() const override { return n_; }
  int64_t channels() const override { return source_->channels(); }
  int64_t num_classes() const override { return source_->num_classes(); }
  const torch::Tensor& targets() const override { return targets_; }
  std::optional<std::pair<int64_t, int64_t>> common_size() const override { return source_->common_size(); }
  torch::Tensor read(int64_t i, const RegionPicker& pick, int64_t min_height, int64_t min_width) const override {
    return source_->read(i, pick, min_height, min_width);
  }
  bool gathers() const override { return source_->gathers(); }
  torch::Tensor gather(const torch::Tensor& ids) const override { return source_->gather(ids); }

 private:
  std::shared_ptr<const SampleSource> source_;
  int64_t n_;
  torch::Tensor targets_;
};

}  // namespace

void check_targets(const SampleSource& source) {
  const torch::Tensor& labels = source.targets();
  const bool classes = source.num_classes() > 0;
  // A class per pixel: int64 [N, H, W] over images of that size.
  const auto size = source.common_size();
  if (classes && labels.defined() && labels.dim() == 3 && labels.scalar_type() == torch::kInt64 && size &&
      labels.size(0) == source.size() && labels.size(1) == size->first && labels.size(2) == size->second) {
    return;
  }
  SP_CHECK_ARG(labels.defined() && labels.dim() == (classes ? 1 : 2) &&
      labels.scalar_type() == (classes ? torch::kInt64 : torch::kFloat) && labels.size(0) == source.size(),
      "data set '", source.name(), "': expected ", classes ? "int64 labels of shape [" : "float targets of shape [",
      source.size(), classes ? "] (or [N, H, W], a class per pixel)" : ", D] (no classes)", ", found ", labels.defined() ? c10::str(labels.scalar_type(), " ",
      labels.sizes()) : std::string("no labels"));
}

void check_sample(const SampleSource& source, int64_t i, const torch::Tensor& sample) {
  SP_CHECK(sample.defined() && sample.dim() == 3 && sample.scalar_type() == torch::kUInt8 &&
               sample.size(0) == source.channels(),
           "data set '", source.name(), "': sample ", i, " came as ",
           sample.defined() ? c10::str(sample.scalar_type(), " ", sample.sizes()) : std::string("nothing"),
           "; expected uint8 [", source.channels(), ", H, W]");
}

torch::Tensor SampleSource::gather(const torch::Tensor&) const {
  throw UsageError(c10::str("data set '", name(), "' reads its samples one by one; it has no gather()"));
}

torch::Tensor DecodingSource::read(int64_t i, const RegionPicker& pick, int64_t, int64_t) const {
  torch::Tensor image = decode(i);
  check_sample(*this, i, image);
  const Region r = pick(image.size(1), image.size(2));
  check_region(r, image.size(1), image.size(2), c10::str("data set '", name(), "', sample ", i));
  return image.narrow(1, r.top, r.height).narrow(2, r.left, r.width);
}

TensorSource::TensorSource(Dataset data) : data_(std::move(data)) {
  const torch::Tensor& images = data_.images;
  SP_CHECK_ARG(images.defined() && images.dim() == 4 && images.scalar_type() == torch::kUInt8 &&
      images.device().is_cpu(), "data set '", data_.name, "': expected uint8 CPU images of shape "
      "[N, C, H, W], found ", images.defined() ? c10::str(images.scalar_type(), " ",
      images.sizes(), " on ", images.device()) : std::string("no images"));
  check_targets(*this);  // TensorSource's own overrides: it is the object being built
  data_.images = images.contiguous();
}

std::optional<std::pair<int64_t, int64_t>> TensorSource::common_size() const {
  return std::make_pair(data_.height(), data_.width());
}

torch::Tensor TensorSource::read(int64_t i, const RegionPicker& pick, int64_t, int64_t) const {
  SP_CHECK_ARG(i >= 0 && i < size(), "data set '", name(), "': sample ", i, " is out of range 0..", size() - 1);
  const Region r = pick(data_.height(), data_.width());
  check_region(r, data_.height(), data_.width(), c10::str("data set '", name(), "', sample ", i));
  return data_.images[i].narrow(1, r.top, r.height).narrow(2, r.left, r.width);
}

torch::Tensor TensorSource::gather(const torch::Tensor& ids) const {
  return data_.images.index_select(0, ids);
}

std::shared_ptr<const SampleSource> first_samples(std::shared_ptr<const SampleSource> source, int64_t n) {
  SP_CHECK_ARG(source, "first_samples: no source");
  SP_CHECK_ARG(n >= 0 && n <= source->size(), "data set '", source->name(), "': cannot take the first ", n,
               " of its ", source->size(), " samples");
  if (n == source->size()) return source;
  return std::make_shared<FirstSamples>(std::move(source), n);
}

Dataset preload(const SampleSource& source, int threads) {
  const auto size = source.common_size();
  SP_CHECK_ARG(size, "data set '", source.name(), "': its images differ in size; preload needs one size");
  const int64_t height = size->first, width = size->second;  // captured below: no structured binding
  Dataset out;
  out.name = source.name();
  out.num_classes = source.num_classes();
  out.labels = source.targets();
  out.images = torch::empty({source.size(), source.channels(), height, width}, torch::kUInt8);
  const RegionPicker whole = [](int64_t h, int64_t w) { return Region{0, 0, h, w}; };
  detail::DecodePool pool(threads);
  pool.run(source.size(), [&](int64_t i) {
    torch::Tensor image = source.read(i, whole, 0, 0);
    SP_CHECK(image.size(1) == height && image.size(2) == width, "data set '", source.name(), "': sample ", i, " is ",
             image.size(1), "x", image.size(2), ", not ", height, "x", width);
    out.images[i].copy_(image);
  });
  return out;
}

}  // namespace data
}  // namespace stalepipe
