// exec::detail::StepGraph: at::cuda::CUDAGraph in a CUDA build, and the CPU test double.
#include "step_graph_impl.h"

#include "common/error_text_impl.h"
#include "stalepipe/common/error.h"

#ifdef STALEPIPE_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stalepipe::exec::detail {
namespace {

class RerunGraph final : public StepGraph {
 public:
  void capture(const std::function<void()>& body) override {
    body_ = body;
    body_();
  }
  void replay() override { body_(); }

 private:
  std::function<void()> body_;
};

}  // namespace

std::unique_ptr<StepGraph> make_rerun_graph() { return std::make_unique<RerunGraph>(); }

#ifdef STALEPIPE_CUDA

namespace {

class CudaGraph final : public StepGraph {
 public:
  explicit CudaGraph(std::string what) : what_(std::move(what)) {}

  void capture(const std::function<void()>& body) override {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    SP_CHECK(stream != c10::cuda::getDefaultCUDAStream(stream.device_index()), what_,
             ": a CUDA graph is captured on the partition's own stream, not the default one");
    try {
      // Thread-local: the threads executor runs other partitions' kernels from other threads
      // meanwhile. {0, 0}: a new private pool; graphs share none, as their replays come in an
      // order other than their captures'.
      graph_.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    } catch (const std::exception& e) {
      throw UsageError(c10::str(what_, ": cannot begin a CUDA graph capture: ", one_line_message(e)));
    }
    try {
      body();
    } catch (const std::exception& e) {
      // Ends the capture (its error is the consequence of the body's) before the stream is used again.
      try {
        graph_.capture_end();
      } catch (const std::exception&) {
      }
      (void)cudaGetLastError();
      throw UsageError(c10::str(what_, ": an operation cannot be captured in a CUDA graph: ", one_line_message(e)));
    }
    try {
      graph_.capture_end();
    } catch (const std::exception& e) {
      (void)cudaGetLastError();
      throw UsageError(c10::str(what_, ": the CUDA graph capture failed: ", one_line_message(e)));
    }
    graph_.replay();  // a capture records the work without running it
  }

  void replay() override { graph_.replay(); }

 private:
  std::string what_;
  at::cuda::CUDAGraph graph_;
};

}  // namespace

std::unique_ptr<StepGraph> make_cuda_graph(const std::string& what) { return std::make_unique<CudaGraph>(what); }

#else

std::unique_ptr<StepGraph> make_cuda_graph(const std::string& what) {
  throw UsageError(c10::str(what, ": this build's LibTorch has no CUDA"));
}

#endif

}  // namespace stalepipe::exec::detail
