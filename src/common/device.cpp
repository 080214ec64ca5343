#include "stalepipe/common/device.h"

#include <torch/cuda.h>

#include "stalepipe/common/error.h"

namespace stalepipe {

void check_device(const c10::Device& d, const std::string& field) {
  if (d.is_cuda()) {
    const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
    SP_CHECK_ARG(d.has_index() && d.index() < count, field, ": ", d.str(), " is not present; this machine has ",
                 count, " CUDA device(s)", count == 0 ? " (or LibTorch was built without CUDA)" : "",
                 d.has_index() ? "" : "; name one, e.g. cuda:0");
  } else {
    SP_CHECK_ARG(d.is_cpu(), field, ": ", d.str(), " is not supported; expected cpu or cuda:N");
  }
}

}  // namespace stalepipe
