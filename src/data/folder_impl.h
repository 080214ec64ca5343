// The walk over an image folder, shared by scan_folder and inspect_folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/data/folder.h"

namespace stalepipe {
namespace data {
namespace detail {

// One class-per-folder tree: ROOT/<class>/**/<image file>.
struct ClassTree {
  std::string root;
  std::vector<std::string> classes;             // sorted folder names
  std::vector<std::vector<std::string>> files;  // per class, sorted as torchvision walks
  int64_t other_files = 0;                      // files with other extensions (left out)
};

// Lists `root`. Throws RuntimeError naming the path for a folder that cannot be listed, a
// symbolic-link loop or a name that is not UTF-8.
ClassTree list_tree(const std::string& root);

// A file as the scan saw it.
struct Probed {
  bool ok = false;
  ImageInfo info;
  std::string fault;   // where !ok: the error's one line
  int64_t bytes = 0;
  int64_t mtime_ns = 0;
};

// Reads every file once on `threads` threads: its header (and, with `decode`, every pixel).
std::vector<Probed> probe_files(const std::vector<std::string>& paths, double max_megapixels, bool decode,
                                int threads);

// The whole content of `path`; RuntimeError naming it if it cannot be read, or if it is
// larger than any image of at most `max_megapixels` can be.
std::vector<uint8_t> read_image_file(const std::string& path, double max_megapixels);

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
