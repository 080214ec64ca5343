#include "stalepipe/train/progress.h"

#include <unistd.h>

#include <cstdio>

#include "stalepipe/common/error.h"

namespace stalepipe::train {

Progress::Progress(ProgressMode mode, int64_t total_steps)
    : total_steps_(total_steps), start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  bar_ = mode == ProgressMode::kBar || (mode == ProgressMode::kAuto && ::isatty(STDERR_FILENO));
}

void Progress::step(int64_t epoch, int64_t step, double loss, double images_per_second) {
  if (!bar_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && step + 1 < total_steps_) return;
  last_draw_ = now;
  const double done = static_cast<double>(step + 1) / static_cast<double>(total_steps_);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = done > 0 ? elapsed * (1 - done) / done : 0;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::fprintf(stderr, "\r\033[Kepoch %lld [%s] %5.1f%% loss %.4f  %.0f img/s  ETA %02d:%02d",
               static_cast<long long>(epoch), bar.c_str(), 100 * done, loss, images_per_second,
               static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stderr);
}

void Progress::clear() {
  if (bar_) std::fprintf(stderr, "\r\033[K");
}

}  // namespace stalepipe::train
