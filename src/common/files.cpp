#include "stalepipe/common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace {

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  SP_CHECK(fd >= 0, system_error("cannot open directory", dir));
  ::fsync(fd);
  ::close(fd);
}

void check_writable(const std::string& file, const std::string& what) {
  SP_CHECK_ARG(!std::filesystem::is_directory(file), what, " ", file, ": is a directory; name a file to write");
  const bool existed = std::filesystem::exists(file);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  SP_CHECK_ARG(fd >= 0, what, " ", file, ": cannot be written (", std::strerror(errno), ")");
  ::close(fd);
  if (!existed) std::filesystem::remove(file);
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  SP_CHECK(fd >= 0, system_error("cannot create", tmp));
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string message = system_error("cannot write", tmp);
      ::close(fd);
      throw RuntimeError(message);
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  SP_CHECK(synced, system_error("cannot fsync", tmp));
  SP_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, system_error("cannot rename to", path));
  const auto parent = std::filesystem::path(path).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SP_CHECK(in.good(), "cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace stalepipe
