// The lock that keeps two runs from writing one run directory: flock(2) on a file inside it,
// held for as long as the RunLock lives. The kernel drops a flock when its holder dies, even
// by kill -9, so a lock file left behind never blocks a resume; the pid written into the file
// only serves the message of the run that is refused.
#pragma once

#include <string>

namespace stalepipe::train {

class RunLock {
 public:
  // Creates run_dir if needed and locks run_dir/`name` without waiting. Throws UsageError
  // "run directory DIR: another run is writing there (pid P holds DIR/NAME)..." when another
  // process (or another RunLock in this one) holds it; RuntimeError when the file cannot be
  // created.
  RunLock(const std::string& run_dir, const std::string& name = "lock");
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The lock file of one writer of a run directory: "lock" for a run in one process and for
// rank 0 of the processes executor; "lock.rank-R" for rank R > 0, which writes only its own
// checkpoint shard, so that ranks sharing the directory do not refuse each other while a
// second run's ranks are refused by the first run's.
std::string lock_name(int rank);

}  // namespace stalepipe::train
