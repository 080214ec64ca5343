#include "stalepipe/data/resample.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

// ---------------------------------------------------------------------------------------------
// random_resized_crop

bool inside(const Region& r, int64_t height, int64_t width) {
  return r.top >= 0 && r.left >= 0 && r.height >= 1 && r.width >= 1 &&
         r.top + r.height <= height && r.left + r.width <= width;
}

TEST(RandomResizedCropTest, AlwaysInsideTheImage) {
  const int64_t kShapes[][2] = {{1, 1}, {1, 1000}, {1000, 1}, {500, 375}, {375, 500},
                                {2, 3},  {7, 5},    {32, 32},  {10, 1000}};
  std::mt19937_64 rng(7);
  for (const auto& shape : kShapes) {
    for (int i = 0; i < 2000; ++i) {
      const Region r = random_resized_crop(shape[0], shape[1], rng);
      ASSERT_TRUE(inside(r, shape[0], shape[1]))
          << shape[0] << "x" << shape[1] << ": " << r.top << "," << r.left << " " << r.height
          << "x" << r.width;
    }
  }
}

// The mean area fraction of a square image's crops against the algorithm's distribution,
// integrated here independently (continuous sizes): a draw (s ~ U(0.08, 1), log r ~
// U(log 3/4, log 4/3)) fits when s r <= 1 and s / r <= 1, with probability p; the result is
// the first fitting draw of ten, else the whole image. Mean = E[s | fits] (1 - q) + q with
// q = (1 - p)^10 (about 0.478). Rounding to whole pixels moves it by well under 0.01.
TEST(RandomResizedCropTest, AreaFractionHasTheExpectedMean) {
  const double lo = std::log(3.0 / 4.0), hi = std::log(4.0 / 3.0);
  const int kGrid = 1000;
  double fits = 0, fitting_area = 0;
  for (int a = 0; a < kGrid; ++a) {
    const double s = 0.08 + 0.92 * (a + 0.5) / kGrid;
    for (int b = 0; b < kGrid; ++b) {
      const double r = std::exp(lo + (hi - lo) * (b + 0.5) / kGrid);
      if (s * r <= 1 && s / r <= 1) {
        fits += 1;
        fitting_area += s;
      }
    }
  }
  const double p = fits / (double(kGrid) * kGrid);
  const double q = std::pow(1 - p, 10);
  const double expected = fitting_area / fits * (1 - q) + q;

  std::mt19937_64 rng(2024);
  const int kDraws = 20000;
  double sum = 0, smallest = 1, largest = 0;
  for (int i = 0; i < kDraws; ++i) {
    const Region r = random_resized_crop(500, 500, rng);
    const double fraction = double(r.height * r.width) / (500.0 * 500.0);
    sum += fraction;
    smallest = std::min(smallest, fraction);
    largest = std::max(largest, fraction);
  }
  EXPECT_NEAR(sum / kDraws, expected, 0.01);  // the standard error is about 0.002
  EXPECT_GE(smallest, 0.079);
  EXPECT_LT(smallest, 0.09);
  EXPECT_LE(largest, 1.0);
  EXPECT_GT(largest, 0.95);
}

TEST(RandomResizedCropTest, SameSeedSameCrops) {
  std::mt19937_64 a(11), b(11), c(12);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const Region ra = random_resized_crop(480, 640, a);
    EXPECT_EQ(ra, random_resized_crop(480, 640, b));
    differs = differs || !(ra == random_resized_crop(480, 640, c));
  }
  EXPECT_TRUE(differs);
}

// Images so elongated that no draw fits (the shorter side is below the smallest crop's):
// torchvision's fallback, the centre crop with the aspect ratio clamped to [3/4, 4/3].
TEST(RandomResizedCropTest, ExtremeAspectRatiosFallBackToTheClampedCentreCrop) {
  std::mt19937_64 rng(3);
  // in_ratio > 4/3: h = H, w = round(H * 4/3), centred.
  EXPECT_EQ(random_resized_crop(1, 1000, rng), (Region{0, 499, 1, 1}));
  EXPECT_EQ(random_resized_crop(10, 1000, rng), (Region{0, 493, 10, 13}));
  // in_ratio < 3/4: w = W, h = round(W / (3/4)).
  EXPECT_EQ(random_resized_crop(1000, 1, rng), (Region{499, 0, 1, 1}));
  EXPECT_EQ(random_resized_crop(1000, 10, rng), (Region{493, 0, 13, 10}));
  // Whole results: 3 / (3/4) = 4 and 9 * 4/3 = 12 (never a half: 4n/3 is not k + 1/2).
  EXPECT_EQ(random_resized_crop(1000, 3, rng), (Region{498, 0, 4, 3}));
  EXPECT_EQ(random_resized_crop(9, 2000, rng), (Region{0, 994, 9, 12}));
}

TEST(RandomResizedCropTest, RejectsAnEmptyImage) {
  std::mt19937_64 rng(1);
  EXPECT_THROW(random_resized_crop(0, 10, rng), UsageError);
  EXPECT_THROW(random_resized_crop(10, -1, rng), UsageError);
}

// ---------------------------------------------------------------------------------------------
// centre_square

TEST(CentreSquareTest, CentredOnTheLongerSideRoundingHalfToEven) {
  EXPECT_EQ(centre_square(500, 375), (Region{62, 0, 375, 375}));   // 62.5 -> 62
  EXPECT_EQ(centre_square(375, 500), (Region{0, 62, 375, 375}));
  EXPECT_EQ(centre_square(10, 7), (Region{2, 0, 7, 7}));           // 1.5 -> 2
  EXPECT_EQ(centre_square(7, 12), (Region{0, 2, 7, 7}));           // 2.5 -> 2
  EXPECT_EQ(centre_square(64, 64), (Region{0, 0, 64, 64}));
  EXPECT_EQ(centre_square(1, 1), (Region{0, 0, 1, 1}));
  EXPECT_THROW(centre_square(0, 5), UsageError);
}

// ---------------------------------------------------------------------------------------------
// resize_bilinear

torch::Tensor resized(const torch::Tensor& image, int64_t height, int64_t width) {
  torch::Tensor out = torch::empty({image.size(0), height, width}, torch::kUInt8);
  resize_bilinear(image, height, width, out.data_ptr<uint8_t>());
  return out;
}

torch::Tensor bytes(const std::vector<int>& values, std::vector<int64_t> shape) {
  return torch::tensor(values, torch::kInt32).to(torch::kUInt8).view(shape);
}

// The 7x5 RGB test image: channel c at (y, x) is (40 x + 25 y + 60 c) mod 256 (with jumps,
// so that a wrong weight shows).
torch::Tensor gradient_7x5() {
  std::vector<int> values;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 5; ++y) {
      for (int x = 0; x < 7; ++x) {
        values.push_back((x * 40 + y * 25 + c * 60) % 256);
      }
    }
  }
  return bytes(values, {3, 5, 7});
}

TEST(ResizeBilinearTest, SameSizeIsACopy) {
  const torch::Tensor image = gradient_7x5();
  EXPECT_TRUE(torch::equal(resized(image, 5, 7), image));
}

TEST(ResizeBilinearTest, ConstantStaysConstant) {
  const torch::Tensor image = torch::full({2, 37, 53}, 201, torch::kUInt8);
  for (const auto& size : {std::vector<int64_t>{5, 9}, {224, 224}, {37, 20}, {100, 53}}) {
    EXPECT_TRUE(torch::equal(resized(image, size[0], size[1]),
                             torch::full({2, size[0], size[1]}, 201, torch::kUInt8)))
        << size[0] << "x" << size[1];
  }
}

// Halving: the triangle widened to support 2 puts weights (1, 3, 3, 1) / 8 on the samples
// 2i-1 .. 2i+2 (the box average for a pattern of period 2), and (3, 3, 1) / 7 at the borders,
// whose window is cut. A 0/200 checkerboard, horizontal pass first (rounded to bytes as PIL
// does): even rows 0,200,.. -> 600/7 = 86, 100, 100, 800/7 = 114; odd rows the mirror. The
// vertical pass over column 0 (86, 114, 86, ...) then gives (3*86 + 3*114 + 86) / 7 = 98 at
// the top, 100 inside, (114 + 3*86 + 3*114) / 7 = 102 at the bottom.
TEST(ResizeBilinearTest, HalvingACheckerboardByHand) {
  std::vector<int> values;
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 8; ++x) {
      values.push_back((x + y) % 2 == 0 ? 0 : 200);
    }
  }
  const torch::Tensor expected = bytes({98, 100, 100, 102,  //
                                        100, 100, 100, 100,  //
                                        100, 100, 100, 100,  //
                                        102, 100, 100, 98},
                                       {1, 4, 4});
  EXPECT_TRUE(torch::equal(resized(bytes(values, {1, 8, 8}), 4, 4), expected));
}

// Doubling 2x2: output sample i's centre is (i + 0.5) / 2 in input pixels, so the weights are
// (1), (3/4, 1/4), (1/4, 3/4), (1) (the border samples see one input sample only).
// Rows: 0,100 -> 0,25,75,100; 200,40 -> 200,160,80,40. Columns likewise, e.g. the second:
// 25, 0.75*25 + 0.25*160 = 58.75 -> 59, 0.25*25 + 0.75*160 = 126.25 -> 126, 160.
TEST(ResizeBilinearTest, Upscaling2x2ByHand) {
  const torch::Tensor expected = bytes({0, 25, 75, 100,     //
                                        50, 59, 76, 85,     //
                                        150, 126, 79, 55,   //
                                        200, 160, 80, 40},
                                       {1, 4, 4});
  EXPECT_TRUE(torch::equal(resized(bytes({0, 100, 200, 40}, {1, 2, 2}), 4, 4), expected));
}

// References from Pillow 9.4 (Image.resize(size, Image.BILINEAR), which resize_bilinear
// reproduces bit for bit), made with /usr/bin/python3:
//   from PIL import Image
//   W, H = 7, 5
//   px = bytes((x * 40 + y * 25 + c * 60) % 256
//              for y in range(H) for x in range(W) for c in range(3))
//   img = Image.frombytes("RGB", (W, H), px)
//   for size in [(3, 2), (11, 9), (7, 3), (4, 5)]:   # PIL sizes are (width, height)
//       w, h = size
//       d = img.resize(size, Image.BILINEAR).tobytes()
//       print(size, [[[d[(y * w + x) * 3 + c] for x in range(w)] for y in range(h)]
//                    for c in range(3)])
struct PilReference {
  int64_t height, width;
  std::vector<int> values;  // [3, height, width]
};

const PilReference kPilReferences[] = {
    {2, 3, {59, 144, 163, 109, 165, 92,  //
            119, 174, 75, 169, 149, 87,  //
            177, 115, 95, 154, 86, 145}},
    {9, 11, {0, 18, 44, 69, 95, 120, 145, 171, 196, 222, 240,      //
             8, 26, 52, 77, 103, 128, 153, 179, 204, 184, 163,     //
             22, 40, 66, 91, 117, 142, 167, 193, 218, 120, 35,     //
             36, 54, 80, 105, 131, 156, 181, 207, 232, 118, 20,    //
             50, 68, 94, 119, 145, 170, 195, 221, 246, 132, 34,    //
             64, 82, 108, 133, 159, 184, 209, 196, 131, 81, 48,    //
             78, 96, 122, 147, 173, 198, 205, 158, 39, 44, 62,     //
             92, 110, 136, 161, 187, 212, 129, 69, 40, 58, 76,     //
             100, 118, 144, 169, 195, 220, 83, 15, 40, 66, 84,     //
             60, 78, 104, 129, 155, 180, 205, 161, 24, 26, 44,     //
             68, 86, 112, 137, 163, 188, 213, 169, 32, 34, 52,     //
             82, 100, 126, 151, 177, 202, 227, 183, 46, 48, 66,    //
             96, 114, 140, 165, 191, 216, 169, 114, 49, 62, 80,    //
             110, 128, 154, 179, 205, 230, 93, 25, 50, 76, 94,     //
             124, 142, 168, 193, 219, 244, 107, 39, 64, 90, 108,   //
             138, 156, 182, 207, 222, 229, 110, 53, 78, 104, 122,  //
             152, 170, 196, 221, 184, 101, 72, 67, 92, 118, 136,   //
             160, 178, 204, 229, 161, 24, 49, 75, 100, 126, 144,   //
             120, 138, 164, 189, 215, 240, 103, 35, 60, 86, 104,   //
             128, 146, 172, 197, 192, 163, 80, 43, 68, 94, 112,    //
             142, 160, 186, 211, 154, 35, 42, 57, 82, 108, 126,    //
             156, 174, 200, 225, 157, 20, 45, 71, 96, 122, 140,    //
             170, 188, 214, 239, 171, 34, 59, 85, 110, 136, 154,   //
             184, 202, 215, 150, 95, 48, 73, 99, 124, 150, 168,    //
             198, 203, 192, 73, 37, 62, 87, 113, 138, 164, 182,    //
             212, 152, 77, 48, 51, 76, 101, 127, 152, 178, 196,    //
             220, 122, 8, 33, 59, 84, 109, 135, 160, 186, 204}},
    // Height only (PIL skips the horizontal pass).
    {3, 7, {11, 51, 91, 131, 171, 211, 141, 50, 90, 130, 170, 210, 193, 34,     //
            89, 129, 169, 209, 103, 33, 73,                                     //
            71, 111, 151, 191, 231, 15, 55, 110, 150, 190, 230, 71, 54, 94,     //
            149, 189, 229, 123, 53, 93, 133,                                    //
            131, 171, 211, 141, 35, 75, 115, 170, 210, 193, 34, 74, 114, 154,   //
            209, 103, 33, 73, 113, 153, 193}},
    // Width only (PIL skips the vertical pass).
    {5, 4, {21, 83, 157, 219, 46, 108, 182, 110, 71, 133, 207, 135, 96, 158, 181, 50,     //
            121, 183, 72, 63,                                                             //
            81, 143, 166, 35, 106, 168, 191, 60, 131, 193, 82, 73, 156, 218, 107, 98,     //
            181, 172, 61, 123,                                                            //
            141, 203, 92, 83, 166, 157, 46, 108, 191, 182, 71, 133, 204, 73, 96, 158,     //
            119, 47, 121, 183}},
};

TEST(ResizeBilinearTest, EqualsPillowBilinear) {
  const torch::Tensor image = gradient_7x5();
  for (const PilReference& ref : kPilReferences) {
    const torch::Tensor expected = bytes(ref.values, {3, ref.height, ref.width});
    const torch::Tensor got = resized(image, ref.height, ref.width);
    EXPECT_TRUE(torch::equal(got, expected)) << ref.height << "x" << ref.width << ": " << got;
  }
}

// A view into a bigger image (the crop of a region) gives what its contiguous copy gives,
// also with a channels-last layout (pixel stride 3).
TEST(ResizeBilinearTest, ReadsStridedViews) {
  torch::manual_seed(5);
  const torch::Tensor big = torch::randint(0, 256, {3, 40, 50}, torch::kUInt8);
  const torch::Tensor crop = big.narrow(1, 7, 21).narrow(2, 11, 30);
  const torch::Tensor hwc = big.permute({1, 2, 0}).contiguous().permute({2, 0, 1});
  ASSERT_EQ(hwc.stride(2), 3);
  for (const auto& size : {std::vector<int64_t>{8, 13}, {21, 30}, {21, 9}, {50, 30}, {40, 61}}) {
    EXPECT_TRUE(torch::equal(resized(crop, size[0], size[1]),
                             resized(crop.contiguous(), size[0], size[1])));
    EXPECT_TRUE(torch::equal(resized(hwc, size[0], size[1]), resized(big, size[0], size[1])));
  }
}

TEST(ResizeBilinearTest, RejectsBadInput) {
  uint8_t out[64];
  const torch::Tensor image = torch::zeros({3, 4, 4}, torch::kUInt8);
  EXPECT_THROW(resize_bilinear(image, 0, 4, out), UsageError);
  EXPECT_THROW(resize_bilinear(image, 4, -1, out), UsageError);
  EXPECT_THROW(resize_bilinear(torch::zeros({3, 4, 4}), 2, 2, out), UsageError);
  EXPECT_THROW(resize_bilinear(torch::zeros({4, 4}, torch::kUInt8), 2, 2, out), UsageError);
  EXPECT_THROW(resize_bilinear(torch::zeros({3, 0, 4}, torch::kUInt8), 2, 2, out), UsageError);
}

// ---------------------------------------------------------------------------------------------
// flip_horizontal

TEST(FlipHorizontalTest, MirrorsEachRowInPlace) {
  torch::Tensor image = bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  flip_horizontal(image.data_ptr<uint8_t>(), 2, 2, 3);
  EXPECT_TRUE(torch::equal(image, bytes({3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10}, {2, 2, 3})));
  flip_horizontal(image.data_ptr<uint8_t>(), 2, 2, 3);
  EXPECT_TRUE(torch::equal(image, bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3})));
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
