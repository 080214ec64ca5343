// Geometry of image transforms with torchvision's semantics: which region to take
// (RandomResizedCrop's draw, Resize + CenterCrop's square), and an antialiased resize.
#pragma once

#include <cstdint>
#include <random>

#include <torch/types.h>

#include "stalepipe/data/image.h"

namespace stalepipe {
namespace data {

// torchvision.transforms.RandomResizedCrop.get_params with scale (0.08, 1) and ratio
// (3/4, 4/3): up to 10 draws of an area fraction (uniform) and a log-uniform aspect ratio,
// the first that fits; else the centre crop with the ratio clamped to the range. Uses only
// `rng`'s raw output (std::mt19937_64 is specified; its distributions are not), so it is
// the same on every platform.
Region random_resized_crop(int64_t height, int64_t width, std::mt19937_64& rng);

// Resize(S) (shorter side to S) then CenterCrop(S), as a region of the stored image: the
// centred square whose side is the shorter side (the offset rounds as CenterCrop's does).
Region centre_square(int64_t height, int64_t width);

// Resizes uint8 [C, H, W] (any strides) to [C, out_height, out_width] with antialiased
// bilinear interpolation (a triangle filter whose support widens by the scale factor when
// shrinking: PIL's BILINEAR, torchvision's antialias=True), writing the contiguous result to
// `out`. Rounds to nearest and clamps to 0..255. Same size: a copy. UsageError for sizes < 1.
void resize_bilinear(const torch::Tensor& image, int64_t out_height, int64_t out_width,
                     uint8_t* out);

// Mirrors uint8 [C, H, W] stored contiguously at `pixels` left to right, in place.
void flip_horizontal(uint8_t* pixels, int64_t channels, int64_t height, int64_t width);

}  // namespace data
}  // namespace stalepipe
