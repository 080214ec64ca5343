// CIFAR-10 binary batches as load_cifar10 reads them (data/cifar10.h): the bytes become
// test_batch.bin beside five valid one-record training batches.
#include <string>

#include "fuzz_support.h"
#include "stalepipe/data/cifar10.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stalepipe;
  static const std::string dir = [] {
    const std::string record = std::string(1, '\x07') + std::string(3072, '\x40');
    for (int i = 1; i <= 5; ++i) fuzz::write_scratch("cifar/data_batch_" + std::to_string(i) + ".bin", record);
    return fuzz::scratch_dir() + "/cifar";
  }();
  fuzz::write_scratch("cifar/test_batch.bin", fuzz::as_string(data, size));
  fuzz::expect_only_stalepipe_errors([&] { data::load_cifar10(dir); });
  return 0;
}
