// Listing and probing the files of an image folder.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "data/decode_pool_impl.h"
#include "data/folder_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Whether `s` is valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool is_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (extra < 0 || (extra > 0 && i + extra >= s.size())) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3f >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

// The name with bytes that are not printable ASCII as \xNN, for a message about it.
std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
      out += buffer;
    }
  }
  return out;
}

bool is_image_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

// A folder's identity, to find a symbolic link that leads back to a folder being walked.
std::pair<uint64_t, uint64_t> folder_id(const std::string& path) {
  struct stat st {};
  SP_CHECK(::stat(path.c_str(), &st) == 0, escaped(path), ": cannot be read: ", std::strerror(errno));
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// The entries of `dir` (names starting with '.' left out), split into folders and files,
// each sorted by name. Symbolic links count as what they point to.
void list_dir(const std::string& dir, std::vector<std::string>& folders, std::vector<std::string>& files) {
  std::error_code error;
  fs::directory_iterator it(dir, error);
  SP_CHECK(!error, escaped(dir), ": cannot be listed: ", error.message());
  for (; it != fs::directory_iterator(); it.increment(error)) {
    SP_CHECK(!error, escaped(dir), ": cannot be listed: ", error.message());
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    SP_CHECK(is_utf8(name), escaped(path), ": the name is not UTF-8; rename it");
    if (name.empty() || name[0] == '.') continue;
    std::error_code kind_error;
    const fs::file_status status = fs::status(it->path(), kind_error);  // follows links
    if (fs::is_directory(status)) {
      folders.push_back(name);
      continue;
    }
    // Reading a FIFO would wait for a writer for ever.
    if (is_image_name(name)) {
      SP_CHECK(!kind_error, escaped(path), ": broken symbolic link (", kind_error.message(), ")");
      SP_CHECK(fs::is_regular_file(status), escaped(path), ": not a regular file (a FIFO, socket or device)");
    }
    files.push_back(name);
  }
  std::sort(folders.begin(), folders.end());
  std::sort(files.begin(), files.end());
}

// Appends the image files under `dir` (its own files first, then each sub-folder's, sorted:
// torchvision's order) to `out`; `above` holds the folders being walked.
void walk(const std::string& dir, std::set<std::pair<uint64_t, uint64_t>>& above, std::vector<std::string>& out,
          int64_t& other_files) {
  const auto id = folder_id(dir);
  SP_CHECK(above.insert(id).second, escaped(dir), ": symbolic link loop (it leads back to a folder above it)");
  std::vector<std::string> folders, files;
  list_dir(dir, folders, files);
  for (const auto& f : files) {
    if (is_image_name(f)) {
      out.push_back(dir + "/" + f);
    } else {
      ++other_files;
    }
  }
  for (const auto& f : folders) walk(dir + "/" + f, above, out, other_files);
  above.erase(id);
}

}  // namespace

ClassTree list_tree(const std::string& root) {
  ClassTree tree;
  tree.root = root;
  std::vector<std::string> loose;
  list_dir(root, tree.classes, loose);
  tree.other_files = static_cast<int64_t>(loose.size());  // files beside the class folders
  std::set<std::pair<uint64_t, uint64_t>> above{folder_id(root)};
  for (const auto& c : tree.classes) {
    tree.files.emplace_back();
    walk(root + "/" + c, above, tree.files.back(), tree.other_files);
  }
  return tree;
}

std::vector<uint8_t> read_image_file(const std::string& path, double max_megapixels) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  SP_CHECK(file, path, ": cannot be read: ", std::strerror(errno));
  // No image within the bound needs more bytes than 16-bit RGBA stored raw, plus its headers:
  // a larger file is refused before it is read into memory.
  const double cap = max_megapixels * 1e6 * 8 + (1 << 20);
  struct stat st {};
  if (::fstat(::fileno(file), &st) == 0 && static_cast<double>(st.st_size) > cap) {
    std::fclose(file);
    throw RuntimeError(c10::str(path, ": ", st.st_size, " bytes is more than an image of at most ", max_megapixels,
                                " megapixels takes; raise the megapixel bound if it is one"));
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) bytes.insert(bytes.end(), buffer, buffer + n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  SP_CHECK(!failed, path, ": cannot be read: ", std::strerror(error));
  return bytes;
}

std::vector<Probed> probe_files(const std::vector<std::string>& paths, double max_megapixels, bool decode,
                                int threads) {
  std::vector<Probed> out(paths.size());
  DecodePool pool(threads);
  pool.run(static_cast<int64_t>(paths.size()), [&](int64_t i) {
    Probed& p = out[i];
    const std::string& path = paths[i];
    try {
      struct stat st {};
      SP_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot be read: ", std::strerror(errno));
      p.bytes = st.st_size;
      p.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      const std::vector<uint8_t> bytes = read_image_file(path, max_megapixels);
      p.info = probe_image(bytes.data(), bytes.size(), path, max_megapixels);
      if (decode) decode_image(bytes.data(), bytes.size(), path, p.info.color ? 3 : 1);
      p.ok = true;
    } catch (const std::exception& e) {
      p.fault = e.what();
    }
  });
  return out;
}

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
