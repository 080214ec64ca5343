#include "common/backward_impl.h"

#include <c10/core/AutogradState.h>
#include <torch/autograd.h>
#include <torch/version.h>

namespace stalepipe {
namespace {

#if TORCH_VERSION_MAJOR >= 2
class MultithreadingOff {
 public:
  MultithreadingOff() : was_(c10::AutogradState::get_tls_state().get_multithreading_enabled()) {
    c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
  }
  ~MultithreadingOff() { c10::AutogradState::get_tls_state().set_multithreading_enabled(was_); }
  MultithreadingOff(const MultithreadingOff&) = delete;
  MultithreadingOff& operator=(const MultithreadingOff&) = delete;

 private:
  bool was_;
};
#else
struct MultithreadingOff {};  // LibTorch 1.x: CPU only here, whose backward runs on the caller
#endif

}  // namespace

void backward_on_this_thread(const std::vector<torch::Tensor>& roots, const std::vector<torch::Tensor>& grads) {
  const MultithreadingOff on_this_thread;
  torch::autograd::backward(roots, grads);
}

}  // namespace stalepipe
