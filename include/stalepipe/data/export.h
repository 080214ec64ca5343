// Writes a data set as an image folder (data/folder.h): DIR/<split>/<class>/<index>.png|.jpg,
// the class folders named by their index, zero-padded so that they sort as numbers, the
// files likewise by the sample's index, so that the folder reads back in the source's order
// within each class.
#pragma once

#include <cstdint>
#include <string>

#include "stalepipe/data/image.h"
#include "stalepipe/data/source.h"

namespace stalepipe {
namespace data {

struct ExportOptions {
  ImageFormat format = ImageFormat::kPng;
  int quality = 95;  // JPEG only, 1..100
  int threads = 1;
};

// Writes every sample of `source` (class indices only; UsageError for regression targets)
// under dir/split/. Throws RuntimeError naming a file that cannot be written.
void export_images(const SampleSource& source, const std::string& dir, const std::string& split,
                   const ExportOptions& options);

}  // namespace data
}  // namespace stalepipe
