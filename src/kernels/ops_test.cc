#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace gk {
namespace {

TEST(Ops, RmsNormMultipliesByWeight) {
  const std::vector<float> x = {1, -2, 3, -4}, w = {1, 2, 0.5f, 1};
  std::vector<float> y(4);
  RmsNorm(x.data(), w.data(), 4, 0.f, y.data());
  const float inv = 1.f / std::sqrt((1 + 4 + 9 + 16) / 4.f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)] * inv * w[size_t(i)], 1e-6);
  RmsNorm(x.data(), nullptr, 4, 0.f, y.data());  // weightless (Gemma 4's v norm)
  EXPECT_NEAR(y[3], -4 * inv, 1e-6);
}

TEST(Ops, GeluTanhKnownValues) {
  EXPECT_NEAR(GeluTanh(0.f), 0.f, 1e-7);
  EXPECT_NEAR(GeluTanh(1.f), 0.8411920f, 1e-6);   // torch gelu(1, approximate='tanh')
  EXPECT_NEAR(GeluTanh(-2.f), -0.0454023f, 1e-6);
}

TEST(Ops, RopeRotatesPairsHalfApart) {
  std::vector<float> v = {1, 0, 0, 0, 0, 0, 0, 0};  // H = 8: pairs (0,4) (1,5) (2,6) (3,7)
  const std::vector<float> inv_freq = {1.f, 0.f, 0.f, 0.f};
  ApplyRope(v.data(), 8, inv_freq.data(), 2);
  EXPECT_NEAR(v[0], std::cos(2.f), 1e-6);
  EXPECT_NEAR(v[4], std::sin(2.f), 1e-6);
  EXPECT_EQ(v[1], 0.f);
}

TEST(Ops, SoftmaxAndLogSoftmaxAgree) {
  std::vector<float> x = {1, 2, 3, 4};
  const double lp = LogSoftmaxAt(x.data(), 4, 2);
  SoftmaxInPlace(x.data(), 4);
  EXPECT_NEAR(std::log(x[2]), lp, 1e-6);
  EXPECT_EQ(ArgMax(x.data(), 4), 3);
}

TEST(Ops, SoftcapBoundsValues) {
  std::vector<float> x = {1000.f, -1000.f, 0.f, 3.f};
  Softcap(x.data(), 4, 30.f);
  EXPECT_NEAR(x[0], 30.f, 1e-4);
  EXPECT_NEAR(x[1], -30.f, 1e-4);
  EXPECT_NEAR(x[3], 30.f * std::tanh(0.1f), 1e-6);
}

}  // namespace
}  // namespace gk
