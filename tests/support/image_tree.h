// Image folders made at test time: files written with the library's encoders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace stalepipe::test {

// Writes `bytes` to `path`, creating its folder.
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
void write_text(const std::string& path, const std::string& text);

// A uint8 [c, h, w] image whose pixels are a function of `seed`: a gradient plus a pattern,
// so that crops, flips and resizes of different images differ.
torch::Tensor pattern_image(int64_t c, int64_t h, int64_t w, int64_t seed);

// Writes `image` as PNG or (jpeg) JPEG at `path`.
void write_image(const std::string& path, const torch::Tensor& image, bool jpeg = false);

// dir/<split>/c<k>/<i>.png: `per_class[k]` images of class k, c x h x w each.
void write_tree(const std::string& dir, const std::string& split, const std::vector<int>& per_class, int64_t c = 1,
                int64_t h = 8, int64_t w = 8);

}  // namespace stalepipe::test
