// IDX files as read_idx reads them (data/idx.h). The first byte picks the file the rest
// becomes, images or labels; the other one is a valid file of one record, so the count check
// between them is reached too.
#include <string>

#include "fuzz_support.h"
#include "stalepipe/data/idx.h"

namespace {

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  if (size == 0) return 0;
  const bool fuzz_labels = data[0] & 1;
  const std::string bytes = fuzz::as_string(data + 1, size - 1);
  static const std::string images = be32(data::kIdxImagesMagic) + be32(1) + be32(2) + be32(2) + std::string(4, '\x10');
  static const std::string labels = be32(data::kIdxLabelsMagic) + be32(1) + std::string(1, '\x03');
  const std::string images_path = fuzz::write_scratch("images", fuzz_labels ? images : bytes);
  const std::string labels_path = fuzz::write_scratch("labels", fuzz_labels ? bytes : labels);
  fuzz::expect_only_stalepipe_errors([&] { data::read_idx(images_path, labels_path, "fuzz"); });
  return 0;
}
