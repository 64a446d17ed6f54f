#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/isa.h"

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

// The AVX-512 and AVX2 versions against the scalar loops (and against double-precision math
// where the scalar loop is itself only float-accurate), over lengths that exercise the tails.
// (An op without a version for the ISA runs the scalar loop: trivially equal.)
class OpsIsaTest : public ::testing::TestWithParam<std::tuple<int64_t, Isa>> {
 protected:
  void SetUp() override {
    isa_ = std::get<1>(GetParam());
    if (int(isa_) > int(BestSupportedIsa())) GTEST_SKIP() << "CPU lacks " << IsaName(isa_);
  }
  Isa isa_ = Isa::kScalar;
  void TearDown() override { SetActiveIsa(BestSupportedIsa()); }
  std::vector<float> Random(int64_t n, float sd, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, sd);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng);
    return v;
  }
};

TEST_P(OpsIsaTest, RmsNormMatchesScalar) {
  const int64_t n = std::get<0>(GetParam());
  const std::vector<float> x = Random(n, 3.f, 1), w = Random(n, 1.f, 2);
  for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    SetActiveIsa(Isa::kScalar);
    RmsNorm(x.data(), wp, n, 1e-6f, want.data());
    SetActiveIsa(isa_);
    RmsNorm(x.data(), wp, n, 1e-6f, got.data());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i])) << i;
    std::vector<float> inplace = x;  // y == x
    RmsNorm(inplace.data(), wp, n, 1e-6f, inplace.data());
    EXPECT_EQ(inplace, got);
  }
}

TEST_P(OpsIsaTest, GeluTanhMulMatchesDoubleMath) {
  const int64_t n = std::get<0>(GetParam());
  std::vector<float> gate = Random(n, 4.f, 3), up = Random(n, 1.f, 4);
  if (n > 3) gate[0] = -12.f, gate[1] = 12.f, gate[2] = 0.f;
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  SetActiveIsa(Isa::kScalar);
  GeluTanhMul(gate.data(), up.data(), n, want.data());
  SetActiveIsa(isa_);
  GeluTanhMul(gate.data(), up.data(), n, got.data());
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = gate[i], u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double exact = x / (1 + std::exp(-2 * u)) * up[i];  // = 0.5·x·(1 + tanh u)·up
    // u itself is computed in float: its rounding moves e^{-2u} by ~2|u| ulp.
    ASSERT_NEAR(got[i], exact, 3e-7 * (2 + 2 * std::fabs(u)) * std::fabs(exact) + 1e-37) << "x " << x;
    // The scalar loop loses accuracy in 1 + tanh(u) for negative x; elsewhere both agree.
    ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 2e-7 * std::fabs(up[i] * x)) << "x " << x;
  }
}

TEST_P(OpsIsaTest, SoftcapMatchesScalar) {
  const int64_t n = std::get<0>(GetParam());
  std::vector<float> x = Random(n, 40.f, 5);
  if (n > 4) x[0] = 1e30f, x[1] = -1e30f, x[2] = 1e-3f, x[3] = 18.74f;  // 18.74/30 ≈ 0.625
  std::vector<float> want = x, got = x;
  SetActiveIsa(Isa::kScalar);
  Softcap(want.data(), n, 30.f);
  SetActiveIsa(isa_);
  Softcap(got.data(), n, 30.f);
  for (size_t i = 0; i < got.size(); ++i) {
    const double exact = 30.0 * std::tanh(double(x[i]) / 30.0);
    ASSERT_NEAR(got[i], exact, 3e-7 * std::fabs(exact)) << "x " << x[i];
    ASSERT_NEAR(got[i], want[i], 5e-7 * std::fabs(want[i])) << "x " << x[i];
  }
}

TEST_P(OpsIsaTest, SoftmaxDotAxpyScaleAddMatchScalar) {
  const int64_t n = std::get<0>(GetParam());
  const std::vector<float> a = Random(n, 5.f, 6), b = Random(n, 1.f, 7);
  auto run = [&](Isa isa) {
    SetActiveIsa(isa);
    std::vector<float> sm = a, ax = b, sc = a, ad = b;
    SoftmaxInPlace(sm.data(), n);
    Axpy(0.37f, a.data(), ax.data(), n);
    Scale(sc.data(), n, -1.7f);
    Add(a.data(), ad.data(), n);
    return std::make_tuple(sm, ax, sc, ad, Dot(a.data(), b.data(), n));
  };
  const auto [sm0, ax0, sc0, ad0, dot0] = run(Isa::kScalar);
  const auto [sm1, ax1, sc1, ad1, dot1] = run(isa_);
  double abs_dot = 0;
  for (int64_t i = 0; i < n; ++i) abs_dot += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
  EXPECT_NEAR(dot1, dot0, 1e-6 * abs_dot);
  // Softmax against double math: the scalar loop's one running float sum is the less
  // accurate of the two over long rows.
  double mx = -INFINITY, sum = 0;
  for (float v : a) mx = std::max(mx, double(v));
  for (float v : a) sum += std::exp(double(v) - mx);
  for (size_t i = 0; i < a.size(); ++i) {
    const double exact = std::exp(double(a[i]) - mx) / sum;
    ASSERT_NEAR(sm1[i], exact, 1e-5 * exact) << i;
    ASSERT_NEAR(ax1[i], ax0[i], 1e-6f * (std::fabs(ax0[i]) + std::fabs(a[i]))) << i;
    ASSERT_EQ(sc1[i], sc0[i]) << i;
    ASSERT_EQ(ad1[i], ad0[i]) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, OpsIsaTest,
                         ::testing::Combine(::testing::Values(1, 7, 16, 17, 100, 256, 2816, 5376, 262144),
                                            ::testing::Values(Isa::kAvx2, Isa::kAvx512)));

}  // namespace
}  // namespace gk
