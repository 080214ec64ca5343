#include "python_batches.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/torch.h>

namespace stalepipe::python {

std::pair<torch::Tensor, torch::Tensor> pair_of(const py::handle& item, const std::string& what) {
  const auto type_name = [](const py::handle& h) { return std::string(py::str(py::type::handle_of(h).attr("__name__"))); };
  SP_CHECK((py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) && py::len(item) == 2, what,
           ": expected a pair (x, y) of a tensor and its target, got ", type_name(item),
           py::isinstance<py::sequence>(item) && !py::isinstance<py::str>(item) ? c10::str(" of length ", py::len(item)) : "");
  const py::handle x = item[py::int_(0)], y = item[py::int_(1)];
  SP_CHECK(THPVariable_Check(x.ptr()), what, ": x must be a torch.Tensor, got ", type_name(x));
  torch::Tensor target;
  if (THPVariable_Check(y.ptr())) {
    target = THPVariable_Unpack(y.ptr());
  } else if (py::isinstance<py::bool_>(y) || !(py::isinstance<py::int_>(y) || py::isinstance<py::float_>(y))) {
    throw RuntimeError(c10::str(what, ": the target must be a torch.Tensor, an int or a float, got ", type_name(y)));
  } else if (py::isinstance<py::int_>(y)) {
    target = torch::tensor(y.cast<int64_t>(), torch::kInt64);
  } else {
    target = torch::tensor(y.cast<double>(), torch::kFloat32);
  }
  return {THPVariable_Unpack(x.ptr()), target};
}

// --- DatasetBatches -------------------------------------------------------------------------

DatasetBatches::DatasetBatches(py::object dataset, std::string name, Options options, PythonErrors& errors)
    : AheadBatches(std::max(1, options.threads), std::max(2, 2 * options.threads)),
      dataset_(std::move(dataset)), name_(std::move(name)), options_(options), errors_(errors) {
  size_ = static_cast<int64_t>(py::len(dataset_));
  SP_CHECK_ARG(size_ > 0, name_, ": the Dataset is empty");
  SP_CHECK_ARG(options_.batch_size >= 1, "DataOptions::batch_size must be >= 1, got ", options_.batch_size);
  SP_CHECK_ARG(!options_.drop_last || size_ >= options_.batch_size, name_, ": ", size_,
               " samples make no whole batch of DataOptions::batch_size ", options_.batch_size,
               " and DataOptions::drop_last is set");
}

DatasetBatches::~DatasetBatches() {
  stop_reading();
  py::gil_scoped_acquire gil;
  dataset_ = py::object();
}

int64_t DatasetBatches::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? size_ / b : (size_ + b - 1) / b;
}

void DatasetBatches::start_epoch(int64_t epoch, int64_t first) {
  stop_reading();
  if (options_.shuffle) {
    // The order is a function of (seed, epoch) alone, so a resumed run reads what it would have.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch) + 1);
    const torch::Tensor order = torch::randperm(size_, generator, torch::kInt64);
    order_.assign(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + size_);
  } else {
    order_.resize(static_cast<size_t>(size_));
    for (int64_t i = 0; i < size_; ++i) order_[static_cast<size_t>(i)] = i;
  }
  start_reading(first);
}

exec::Input DatasetBatches::produce(int64_t index) {
  if (index >= batches_per_epoch()) return {};
  const int64_t begin = index * options_.batch_size, end = std::min(size_, begin + options_.batch_size);
  std::vector<torch::Tensor> xs, ys;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t id = order_[static_cast<size_t>(i)];
    const std::string what = c10::str(name_, " item ", id);
    auto [x, y] = errors_.call(what, [&] { return pair_of(dataset_[py::int_(id)], what); });
    SP_CHECK(xs.empty() || (x.sizes() == xs.front().sizes() && x.scalar_type() == xs.front().scalar_type()), what,
             ": x is ", x.sizes(), " ", x.scalar_type(), ", item ", order_[static_cast<size_t>(begin)], "'s was ",
             xs.front().sizes(), " ", xs.front().scalar_type(), "; a batch needs samples of one shape and type");
    xs.push_back(std::move(x));
    ys.push_back(std::move(y));
  }
  return {torch::stack(xs), torch::stack(ys)};
}

// --- IterableBatches ------------------------------------------------------------------------

IterableBatches::IterableBatches(py::object iterable, std::string name, PythonErrors& errors, int ahead)
    : AheadBatches(1, ahead), iterable_(std::move(iterable)), name_(std::move(name)), errors_(errors) {
  if (py::hasattr(iterable_, "__len__")) {
    try {
      length_ = static_cast<int64_t>(py::len(iterable_));
    } catch (const py::error_already_set&) {
      length_ = -1;  // an IterableDataset's DataLoader has __len__ that raises TypeError
    }
  }
}

IterableBatches::~IterableBatches() {
  stop_reading();
  py::gil_scoped_acquire gil;
  iterator_ = py::object();
  iterable_ = py::object();
}

void IterableBatches::start_epoch(int64_t epoch, int64_t first) {
  stop_reading();
  errors_.call(c10::str(name_, ", epoch ", epoch + 1, ": iter()"), [&] {
    iterator_ = py::object();  // the last epoch's (a DataLoader's workers end with it)
    iterator_ = py::reinterpret_steal<py::object>(PyObject_GetIter(iterable_.ptr()));
    if (!iterator_) throw py::error_already_set();
    // A resumed epoch starts at its batch `first`: the batches before it are read and dropped,
    // which gives the same batches where the iterable's order depends only on the epoch.
    for (int64_t i = 0; i < first; ++i) {
      py::object skipped = py::reinterpret_steal<py::object>(PyIter_Next(iterator_.ptr()));
      if (!skipped) {
        if (PyErr_Occurred()) throw py::error_already_set();
        break;
      }
    }
  });
  start_reading(first);
}

exec::Input IterableBatches::produce(int64_t index) {
  const std::string what = c10::str(name_, " batch ", index);
  auto batch = errors_.call(what, [&]() -> std::optional<std::pair<torch::Tensor, torch::Tensor>> {
    py::object item = py::reinterpret_steal<py::object>(PyIter_Next(iterator_.ptr()));
    if (!item) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return std::nullopt;
    }
    return pair_of(item, what);
  });
  if (!batch) return {};
  SP_CHECK(batch->first.dim() >= 1 && batch->second.dim() >= 1 && batch->first.size(0) == batch->second.size(0),
           what, ": x ", batch->first.sizes(), " and y ", batch->second.sizes(),
           " are not a batch (the same number of samples in their first dimension)");
  return {std::move(batch->first), std::move(batch->second)};
}

}  // namespace stalepipe::python
