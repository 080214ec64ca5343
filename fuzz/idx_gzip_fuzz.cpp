// Gzip-compressed IDX image files: the inflater (data/file_bytes.cpp: truncated and corrupt
// streams, the size limit) and then the IDX parser on what it inflates. The corpus holds
// gzip files, which the mutations damage.
#include <string>

#include "fuzz_support.h"
#include "stalepipe/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  // A valid gzip label file of one record would need zlib here; a raw one serves, as the
  // reader detects gzip per file by its magic bytes.
  static const std::string labels = std::string("\0\0\x08\x01\0\0\0\x01\x03", 9);
  const std::string images_path = fuzz::write_scratch("images.gz", fuzz::as_string(data, size));
  const std::string labels_path = fuzz::write_scratch("labels", labels);
  fuzz::expect_only_stalepipe_errors([&] { data::read_idx(images_path, labels_path, "fuzz"); });
  return 0;
}
