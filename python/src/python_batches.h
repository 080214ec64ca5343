// Data held in Python as the training loop's batches (api/pipeline_trainer.h, BatchSource):
// a map-style Dataset of (tensor, target) samples, read into batches by threads of our own,
// and any iterable of (x, y) batches (a DataLoader), pulled ahead on a thread (both
// AheadBatches, api/ahead_batches.h). Every call into
// Python takes the GIL for itself; the loop calls these without it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "python_errors.h"
#include "stalepipe/api/ahead_batches.h"

namespace stalepipe::python {

namespace py = pybind11;

// A map-style Dataset: len(dataset) samples, dataset[i] a (tensor, target) pair, batches of
// `batch_size` in an order drawn from (seed, epoch) where `shuffle`.
class DatasetBatches : public AheadBatches {
 public:
  struct Options {
    int64_t batch_size = 1;
    bool shuffle = true, drop_last = false;
    uint64_t seed = 0;
    int threads = 1;
  };
  // Reads len(dataset) (with the GIL held by the caller). `name` names it in errors.
  DatasetBatches(py::object dataset, std::string name, Options options, PythonErrors& errors);
  ~DatasetBatches() override;
  int64_t samples() const { return size_; }
  int64_t batches_per_epoch() const override;
  void start_epoch(int64_t epoch, int64_t first) override;

 private:
  exec::Input produce(int64_t index) override;

  py::object dataset_;
  std::string name_;
  Options options_;
  PythonErrors& errors_;
  int64_t size_ = 0;
  std::vector<int64_t> order_;
};

// Any iterable of (x, y) batches, iter() at each epoch's start. Its length is len(iterable)
// where it has one.
class IterableBatches : public AheadBatches {
 public:
  IterableBatches(py::object iterable, std::string name, PythonErrors& errors, int ahead = 2);
  ~IterableBatches() override;
  int64_t batches_per_epoch() const override { return length_; }
  void start_epoch(int64_t epoch, int64_t first) override;

 private:
  exec::Input produce(int64_t index) override;

  py::object iterable_, iterator_;
  std::string name_;
  PythonErrors& errors_;
  int64_t length_ = -1;
};

// (x, y) of a sample or batch: x a tensor, y a tensor or a Python number. Throws
// RuntimeError naming `what` otherwise. Needs the GIL.
std::pair<torch::Tensor, torch::Tensor> pair_of(const py::handle& item, const std::string& what);

}  // namespace stalepipe::python
