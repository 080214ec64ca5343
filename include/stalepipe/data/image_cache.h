// A split of an image folder decoded once into a file: the uint8 pixels at the loader's
// output size (the centred squares, or as stored), memory-mapped by every later run that
// matches, so that it reads the pixels instead of decoding them, with the same values.
//
// File: "SPCACHE1", a JSON header (what it holds, of which files, and the CRC-32 of the
// pixels and labels) and, 64-byte aligned, uint8 [N, C, H, W] then int64 [N] labels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stalepipe/data/folder.h"
#include "stalepipe/data/loader.h"

namespace stalepipe {
namespace data {

// The cache of `source` through `options`'s view (its image_size; resized_crop must be off)
// in folder `dir`: opened where a file there holds these files at this size with a good
// checksum, else decoded on options.threads threads and written first. Returns the cached
// split as an in-memory source over the mapping. Throws UsageError with resized_crop (its
// crops come from the full images), RuntimeError where the file cannot be written, or where
// a file of the right name is damaged (naming it: delete it to have it made again).
std::shared_ptr<const SampleSource> cached_source(std::shared_ptr<const FolderSource> source,
                                                  const LoaderOptions& options, const std::string& dir);

}  // namespace data
}  // namespace stalepipe
