// Crash-safe file writing: write to a temporary name, fsync, rename over the target, fsync
// the directory. A crash at any moment leaves either the old file or the new one, whole.
#pragma once

#include <string>

namespace stalepipe {

// Throws RuntimeError naming the path and the system error.
void write_file_atomic(const std::string& path, const std::string& contents);
std::string read_file(const std::string& path);
void fsync_directory(const std::string& dir);

// Opens `file` for writing as a later write will (creating it, then removing what it created),
// so that a missing folder, a directory or a read-only file system is found before a run that
// ends by writing it. UsageError "<what> <file>: ..." otherwise.
void check_writable(const std::string& file, const std::string& what);

}  // namespace stalepipe
