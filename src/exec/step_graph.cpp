// exec::detail::StepGraph: at::cuda::CUDAGraph in a CUDA build, and the CPU stand-in.
#include "step_graph_impl.h"

#include <atomic>
#include <memory>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include "common/error_text_impl.h"
#include "stalepipe/common/error.h"

#ifdef STALEPIPE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stalepipe::exec::detail {
namespace {

const void* address_of(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

class ReplayGraph final : public StepGraph {
 public:
  explicit ReplayGraph(std::string what) : what_(std::move(what)) {}

  void capture(const std::function<void()>& body, const GraphResults& results) override {
    body_ = body;
    results_ = results;
    body_();
    for (torch::Tensor* output : outputs()) memory_.push_back(*output);
    for (const auto& entry : fixed()) addresses_.push_back(address_of(entry.second));
  }

  void replay() override {
    check_fixed("between replays");
    body_();
    check_fixed("by the replayed work");
    const std::vector<torch::Tensor*> now = outputs();
    SP_CHECK(now.size() == memory_.size(), what_, ": a replay left ", now.size(), " results, the capture ",
             memory_.size());
    for (size_t i = 0; i < now.size(); ++i) into_capture_memory(i, *now[i]);
  }

 private:
  std::vector<torch::Tensor*> outputs() const {
    return results_.outputs ? results_.outputs() : std::vector<torch::Tensor*>();
  }
  std::vector<std::pair<std::string, torch::Tensor>> fixed() const {
    return results_.fixed ? results_.fixed() : std::vector<std::pair<std::string, torch::Tensor>>();
  }

  void check_fixed(const char* when) const {
    const auto all = fixed();
    SP_CHECK(all.size() == addresses_.size(), what_, ": ", all.size(), " fixed tensors now, ", addresses_.size(),
             " at capture");
    for (size_t i = 0; i < all.size(); ++i) {
      SP_CHECK(address_of(all[i].second) == addresses_[i], what_, ": ", all[i].first, " moved ", when,
               "; a replay writes it at its address at capture");
    }
  }

  // Writes result i where the capture left it, and points the variable's tensor there.
  void into_capture_memory(size_t i, torch::Tensor& result) const {
    const torch::Tensor& memory = memory_[i];
    if (!memory.defined() && !result.defined()) return;
    SP_CHECK(memory.defined() && result.defined() && memory.sizes() == result.sizes() &&
                 memory.strides() == result.strides() && memory.scalar_type() == result.scalar_type(),
             what_, ": result ", i, " is ", result.defined() ? c10::str(result.sizes()) : "none", " after a replay, ",
             memory.defined() ? c10::str(memory.sizes()) : "none", " at capture");
    if (result.data_ptr() == memory.data_ptr()) return;
    {
      torch::NoGradGuard no_grad;
      memory.detach().copy_(result.detach());
    }
    result.set_data(memory.detach());
  }

  std::string what_;
  std::function<void()> body_;
  GraphResults results_;
  std::vector<torch::Tensor> memory_;   // the results at capture
  std::vector<const void*> addresses_;  // the fixed tensors' at capture
};

}  // namespace

std::unique_ptr<StepGraph> make_replay_graph(const std::string& what) { return std::make_unique<ReplayGraph>(what); }

#ifdef STALEPIPE_CUDA

namespace {

// A capture registers its graph with the device's default CUDA generator (a set of graphs and
// two tensors it may reallocate, kept without a lock: PyTorch captures one graph at a time),
// and each replay and each graph's destruction update that state too. Partitions capture,
// replay and drop their graphs from threads of their own, so these calls take this lock. A
// capture's body holds it while it queues its work, its backward's included, which runs on
// the capturing thread (common/backward_impl.h): it waits for no thread that takes it.
std::mutex& generator_state_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::atomic<bool> graph_lock_on{true};

// The lock, unless a negative control turned it off.
class GraphLock {
 public:
  GraphLock() : lock_(generator_state_mutex(), std::defer_lock) {
    if (graph_lock_on.load()) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

class CudaGraph final : public StepGraph {
 public:
  CudaGraph(std::string what, CudaGraph* share_pool_of) : what_(std::move(what)), share_pool_of_(share_pool_of) {
    const GraphLock lock;
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
  }

  ~CudaGraph() override {
    const GraphLock lock;
    graph_.reset();
  }

  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void capture(const std::function<void()>& body, const GraphResults& /*results: a replay writes there*/) override {
    const GraphLock lock;
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    SP_CHECK(stream != c10::cuda::getDefaultCUDAStream(stream.device_index()), what_,
             ": a CUDA graph is captured on the partition's own stream, not the default one");
    try {
      // Thread-local: the threads executor runs other partitions' kernels from other threads
      // meanwhile. {0, 0}: a new private pool.
      using Pool = decltype(graph_->pool());
      graph_->capture_begin(share_pool_of_ ? share_pool_of_->graph_->pool() : Pool{0, 0}, cudaStreamCaptureModeThreadLocal);
    } catch (const std::exception& e) {
      throw UsageError(c10::str(what_, ": cannot begin a CUDA graph capture: ", one_line_message(e)));
    }
    try {
      body();
    } catch (const std::exception& e) {
      // Ends the capture (its error is the consequence of the body's) before the stream is used again.
      try {
        graph_->capture_end();
      } catch (const std::exception&) {
      }
      (void)cudaGetLastError();
      throw UsageError(c10::str(what_, ": an operation cannot be captured in a CUDA graph: ", one_line_message(e)));
    }
    try {
      graph_->capture_end();
    } catch (const std::exception& e) {
      (void)cudaGetLastError();
      throw UsageError(c10::str(what_, ": the CUDA graph capture failed: ", one_line_message(e)));
    }
    graph_->replay();  // a capture records the work without running it
  }

  void replay() override {
    const GraphLock lock;
    graph_->replay();
  }

 private:
  std::string what_;
  CudaGraph* share_pool_of_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

}  // namespace

bool set_graph_lock_for_tests(bool on) { return graph_lock_on.exchange(on); }

std::unique_ptr<StepGraph> make_cuda_graph(const std::string& what, StepGraph* share_pool_of) {
  auto* pool_owner = dynamic_cast<CudaGraph*>(share_pool_of);
  SP_CHECK(!share_pool_of || pool_owner, what, ": a CUDA graph shares a pool only with another CUDA graph");
  return std::make_unique<CudaGraph>(what, pool_owner);
}

#else

bool set_graph_lock_for_tests(bool /*on*/) { return true; }

std::unique_ptr<StepGraph> make_cuda_graph(const std::string& what, StepGraph* /*share_pool_of*/) {
  throw UsageError(c10::str(what, ": this build's LibTorch has no CUDA"));
}

#endif

torch::Tensor generator_mark(bool cuda, const torch::Device& device) {
  if (!cuda) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
#ifdef STALEPIPE_CUDA
  at::Generator generator = at::cuda::detail::getDefaultCUDAGenerator(device.index());
  std::lock_guard<std::mutex> lock(generator.mutex());
  const uint64_t offset = generator.get<at::CUDAGeneratorImpl>()->philox_offset_per_thread();
  return torch::tensor(static_cast<int64_t>(offset), torch::kLong);
#else
  throw UsageError(c10::str(device.str(), ": this build's LibTorch has no CUDA generator"));
#endif
}

}  // namespace stalepipe::exec::detail
