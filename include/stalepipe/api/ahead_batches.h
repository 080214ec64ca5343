// A BatchSource whose batches are made ahead on threads of its own and handed out in order:
// what the Python package's Dataset and DataLoader sources share (python/src/python_batches.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "stalepipe/api/pipeline_trainer.h"

namespace stalepipe {

// produce(index) makes batch `index` of the epoch (an undefined x past the end); it runs on the
// threads, several at once. An error it throws is given back by next() at that batch's turn.
class AheadBatches : public BatchSource {
 public:
  ~AheadBatches() override;
  exec::Input next() override;

 protected:
  AheadBatches(int threads, int ahead) : threads_(threads), ahead_(ahead) {}
  // Starts reading the epoch's batches at `first` (stopping the reads of the one before).
  void start_reading(int64_t first);
  // Joins the threads; what a derived class's destructor calls before it drops what produce uses.
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

}  // namespace stalepipe
