#include "run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "stalepipe/common/error.h"

namespace stalepipe::train {
namespace {

// The holder's pid as it wrote it, or "" (a holder between its flock and its write).
std::string holder_pid(const std::string& path) {
  std::ifstream in(path);
  std::string pid;
  in >> pid;
  return pid;
}

}  // namespace

RunLock::RunLock(const std::string& run_dir, const std::string& name)
    : path_((std::filesystem::path(run_dir) / name).string()) {
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  SP_CHECK(!error, "run directory ", run_dir, ": cannot create the directory: ", error.message());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SP_CHECK(fd_ >= 0, "run directory ", run_dir, ": cannot create the lock file ", path_, ": ",
           std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    ::close(fd_);
    fd_ = -1;
    SP_CHECK(why == EWOULDBLOCK, "run directory ", run_dir, ": cannot lock ", path_, ": ", std::strerror(why));
    const std::string pid = holder_pid(path_);
    throw UsageError(c10::str("run directory ", run_dir, ": another run is writing there (",
                              pid.empty() ? std::string("a process") : "pid " + pid, " holds ", path_,
                              "); wait for it to end or choose another directory"));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // Best effort: the pid only makes the refusal's message more useful.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

std::string lock_name(int rank) { return rank <= 0 ? "lock" : "lock.rank-" + std::to_string(rank); }

}  // namespace stalepipe::train
