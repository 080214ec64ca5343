// A backward pass run by the thread that asks for it. Private to src/.
#pragma once

#include <vector>

#include <torch/types.h>

namespace stalepipe {

// torch::autograd::backward(roots, grads), with every node run on the calling thread.
// LibTorch's engine runs the nodes of a CUDA device's tensors on one engine thread per device,
// shared by every caller, so partitions or replicas that share a GPU would have their backward
// kernels launched one caller at a time from that thread while their own threads wait. With the
// engine's multithreading off (LibTorch 2.0 and later) each caller's backward runs on its own
// thread, as a backward of CPU tensors always does; the nodes, their streams and their order are
// the same, so the results are too.
void backward_on_this_thread(const std::vector<torch::Tensor>& roots, const std::vector<torch::Tensor>& grads);

}  // namespace stalepipe
