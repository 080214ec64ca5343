// A data race on purpose, for scripts/sanitize.sh thread: TSan must report it. It runs in our
// own code with LibTorch loaded, so a suppression wide enough to hide it (or a build without
// instrumentation) fails the script instead of passing every test unseen. Never a ctest test.
#include <cstdio>
#include <thread>

#include <torch/torch.h>

namespace {

// noinline: the race's stack names this function, which the script looks for.
__attribute__((noinline)) int race_on_purpose() {
  int shared = 0;  // written by one thread, read by the other, no synchronisation
  std::thread writer([&shared] {
    for (int i = 0; i < 1000; ++i) shared = i;
  });
  int seen = 0;
  for (int i = 0; i < 1000; ++i) seen += shared;
  writer.join();
  return seen;
}

}  // namespace

int main() {
  // LibTorch's libraries loaded and used, as in the tests, so their suppressions are active.
  const auto sum = torch::ones({4}).sum().item<float>();
  std::printf("canary: %d %g\n", race_on_purpose(), sum);
  return 0;
}
