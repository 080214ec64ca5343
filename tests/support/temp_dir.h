// A fresh temporary directory per test, removed with everything in it on destruction.
#pragma once

#include <string>

namespace stalepipe {
namespace test {

class TempDir {
 public:
  // Creates $TMPDIR/stalepipe-test-XXXXXX (or under /tmp). Throws std::runtime_error on failure.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name; creates nothing.
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace test
}  // namespace stalepipe
