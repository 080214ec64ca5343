// Encoded images as probe_image and decode_image read them (data/image.h): the probe, a whole
// decode to RGB, and a region decode to gray at a reduced JPEG scale. The pixel bound is small
// so that a mutated header cannot make a run slow.
#include "fuzz_support.h"
#include "stalepipe/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  constexpr double kMaxMegapixels = 4;
  fuzz::expect_only_stalepipe_errors([&] {
    const data::ImageInfo info = data::probe_image(data, size, "fuzz.img", kMaxMegapixels);
    data::decode_image(data, size, "fuzz.img", 3, {0, 0, info.height, info.width}, 0, 0,
                       kMaxMegapixels);
    const data::Region region{info.height / 3, info.width / 4, info.height - info.height / 3,
                              (info.width + 1) / 2};
    data::decode_image(data, size, "fuzz.img", 1, region, 8, 8, kMaxMegapixels);
  });
  return 0;
}
