// Precompiled header: the LibTorch headers most translation units need. Parsing them costs
// ~16 s per file on the 2-core CI machine; precompiled once, each file compiles in about half that.
#pragma once
#include <torch/nn.h>
#include <torch/serialize.h>
#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <string>
#include <vector>
#include <memory>
#include <functional>
