// Data held in Python as the training loop's batches (api/pipeline_trainer.h, BatchSource):
// a map-style Dataset of (tensor, target) samples, read into batches by threads of our own,
// and any iterable of (x, y) batches (a DataLoader), pulled ahead on a thread. Every call into
// Python takes the GIL for itself; the loop calls these without it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pybind11/pybind11.h>

#include "python_errors.h"
#include "stalepipe/api/pipeline_trainer.h"

namespace stalepipe::python {

namespace py = pybind11;

// Batches read ahead on `threads` threads and handed out in order: the part both kinds share.
// produce(index) makes batch `index` of the epoch (an undefined x past the end); it runs on the
// threads, several at once.
class AheadBatches : public BatchSource {
 public:
  ~AheadBatches() override;
  exec::Input next() override;

 protected:
  AheadBatches(int threads, int ahead) : threads_(threads), ahead_(ahead) {}
  // Starts reading the epoch's batches at `first` (stopping the reads of the one before).
  void start_reading(int64_t first);
  // Joins the threads; what a derived class's destructor calls before it drops its Python objects.
  void stop_reading();
  virtual exec::Input produce(int64_t index) = 0;

 private:
  struct Slot {
    exec::Input input;
    std::exception_ptr error;
  };
  void read_loop();

  const int threads_, ahead_;
  std::vector<std::thread> readers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Slot> ready_;
  int64_t next_to_read_ = 0, next_to_give_ = 0, end_ = -1;  // end_: the first index past the epoch
  bool stopping_ = false;
};

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
