// Whether a device named by the user can be used here.
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace stalepipe {

// A CPU, or a CUDA device with an index this machine has. Throws UsageError naming `field`
// and the device otherwise, e.g. "--device cuda:0 is not present; this machine has 0 CUDA
// device(s) (or LibTorch was built without CUDA)".
void check_device(const c10::Device& device, const std::string& field);

}  // namespace stalepipe
