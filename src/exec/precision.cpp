#include "stalepipe/exec/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "stalepipe/common/names.h"

namespace stalepipe::exec {
namespace {

const std::pair<Precision, const char*> kPrecisionNames[] = {
    {Precision::kFp32, "fp32"}, {Precision::kTf32, "tf32"}, {Precision::kBf16, "bf16"}};

// LibTorch 2.4 replaced the per-device autocast calls with ones that take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(c10::DeviceType type) { return at::autocast::is_autocast_enabled(type); }
void set_autocast_enabled(c10::DeviceType type, bool on) { at::autocast::set_autocast_enabled(type, on); }
c10::ScalarType autocast_dtype(c10::DeviceType type) { return at::autocast::get_autocast_dtype(type); }
void set_autocast_dtype(c10::DeviceType type, c10::ScalarType dtype) { at::autocast::set_autocast_dtype(type, dtype); }
#else
bool autocast_enabled(c10::DeviceType type) {
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_autocast_enabled(c10::DeviceType type, bool on) {
  type == c10::DeviceType::CUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
c10::ScalarType autocast_dtype(c10::DeviceType type) {
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_dtype(c10::DeviceType type, c10::ScalarType dtype) {
  type == c10::DeviceType::CUDA ? at::autocast::set_autocast_gpu_dtype(dtype) : at::autocast::set_autocast_cpu_dtype(dtype);
}
#endif

}  // namespace

Precision precision_from_name(const std::string& name, const std::string& field) {
  return value_of(kPrecisionNames, name, field);
}

std::string to_string(Precision precision) { return name_of(kPrecisionNames, precision); }

void set_tf32(Precision precision) {
  const bool on = precision != Precision::kFp32;
  at::globalContext().setAllowTF32CuBLAS(on);
  at::globalContext().setAllowTF32CuDNN(on);
}

AutocastScope::AutocastScope(Precision precision, const torch::Device& device) {
  if (precision != Precision::kBf16) return;
  active_ = true;
  type_ = device.type();
  was_enabled_ = autocast_enabled(type_);
  was_dtype_ = autocast_dtype(type_);
  set_autocast_dtype(type_, c10::ScalarType::BFloat16);
  set_autocast_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_enabled(type_, was_enabled_);
  set_autocast_dtype(type_, was_dtype_);
}

torch::Tensor to_full_precision(const torch::Tensor& t) {
  if (!t.defined() || !t.is_floating_point() || t.element_size() >= 4) return t;
  return t.to(torch::kFloat);
}

}  // namespace stalepipe::exec
