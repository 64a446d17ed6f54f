// Backward row kernels against finite differences of their forward kernels, and the loss
// head's vector kernels against their scalar loops.
#include "kernels/train_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/isa.h"
#include "kernels/ops.h"

namespace gk {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// d/dx_i of Σ_j dy_j·f(x)_j by central differences in double.
template <class F>
double Numeric(F f, std::vector<float> x, const std::vector<float>& dy, size_t i, double h) {
  auto dot = [&](const std::vector<float>& in) {
    std::vector<double> y = f(in);
    double s = 0;
    for (size_t j = 0; j < y.size(); ++j) s += y[j] * dy[j];
    return s;
  };
  const float saved = x[i];
  x[i] = saved + float(h);
  const double plus = dot(x);
  x[i] = saved - float(h);
  const double minus = dot(x);
  return (plus - minus) / (2 * h);
}

TEST(TrainOps, RmsNormBackwardMatchesFiniteDifferences) {
  const int n = 24;
  for (bool weighted : {true, false}) {
    const auto x = Random(n, 1), w = Random(n, 2), dy = Random(n, 3);
    auto f = [&](const std::vector<float>& in) {
      double ss = 0;
      for (float v : in) ss += double(v) * v;
      const double r = 1.0 / std::sqrt(ss / n + 1e-6);
      std::vector<double> y(n);
      for (int i = 0; i < n; ++i) y[size_t(i)] = in[size_t(i)] * r * (weighted ? w[size_t(i)] : 1.f);
      return y;
    };
    std::vector<float> dx(n, 0.5f);
    RmsNormBackward(x.data(), weighted ? w.data() : nullptr, n, 1e-6f, dy.data(), dx.data(), true);
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(dx[size_t(i)] - 0.5f, Numeric(f, x, dy, size_t(i), 1e-3), 2e-3) << i;
    }
  }
}

TEST(TrainOps, GeluTanhMulBackwardMatchesFiniteDifferences) {
  const int n = 45;  // not a multiple of the vector width
  const auto gate = Random(n, 4, 2.f), up = Random(n, 5), dout = Random(n, 6);
  std::vector<float> dgate(n), dup(n), dgate_scalar(n), dup_scalar(n);
  SetActiveIsa(Isa::kScalar);
  GeluTanhMulBackward(gate.data(), up.data(), dout.data(), n, dgate_scalar.data(), dup_scalar.data());
  SetActiveIsa(BestSupportedIsa());
  GeluTanhMulBackward(gate.data(), up.data(), dout.data(), n, dgate.data(), dup.data());
  for (int i = 0; i < n; ++i) {
    const double h = 1e-3, g = gate[size_t(i)];
    const double num = (GeluTanh(float(g + h)) - GeluTanh(float(g - h))) / (2 * h) * up[size_t(i)] * dout[size_t(i)];
    EXPECT_NEAR(dgate[size_t(i)], num, 2e-3 * (1 + std::abs(num))) << i;
    EXPECT_FLOAT_EQ(dup_scalar[size_t(i)], GeluTanh(gate[size_t(i)]) * dout[size_t(i)]);
    EXPECT_NEAR(GeluTanhDerivative(gate[size_t(i)]) * up[size_t(i)] * dout[size_t(i)], dgate_scalar[size_t(i)], 1e-5);
    // The vector path (tanh of vec_math) against the scalar loop (libm's tanhf).
    EXPECT_NEAR(dgate[size_t(i)], dgate_scalar[size_t(i)], 1e-6f * (1.f + std::fabs(dgate_scalar[size_t(i)]))) << i;
    EXPECT_NEAR(dup[size_t(i)], dup_scalar[size_t(i)], 1e-6f * (1.f + std::fabs(dup_scalar[size_t(i)]))) << i;
  }
}

TEST(TrainOps, LossRowKernelsAgreeAcrossIsas) {
  if (BestSupportedIsa() == Isa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU";
  const int n = 1003;  // not a multiple of the vector width
  auto z = Random(n, 7, 5.f);
  for (float& v : z) v = 30.f * std::tanh(v / 30.f);  // capped logits
  const float m = *std::max_element(z.begin(), z.end());
  SetActiveIsa(Isa::kScalar);
  const double s_scalar = SumExpMinus(z.data(), n, m);
  std::vector<float> g_scalar = z;
  CrossEntropyGradRow(g_scalar.data(), n, m + float(std::log(s_scalar)), 17, 30.f, 0.25f);
  SetActiveIsa(BestSupportedIsa());
  const double s_vec = SumExpMinus(z.data(), n, m);
  std::vector<float> g_vec = z;
  CrossEntropyGradRow(g_vec.data(), n, m + float(std::log(s_scalar)), 17, 30.f, 0.25f);
  EXPECT_NEAR(s_vec, s_scalar, 1e-5 * s_scalar);
  for (int j = 0; j < n; ++j) EXPECT_NEAR(g_vec[size_t(j)], g_scalar[size_t(j)], 1e-6) << j;
  // The gradient of a row sums to 0 without a cap (softmax minus one-hot).
  std::vector<float> g = z;
  CrossEntropyGradRow(g.data(), n, m + float(std::log(s_scalar)), 17, 0.f, 1.f);
  double total = 0;
  for (float v : g) total += v;
  EXPECT_NEAR(total, 0.0, 1e-5);
  EXPECT_LT(g[17], 0.f);
  int64_t arg = -1;
  EXPECT_EQ(RowMaxArg(z.data(), n, &arg), m);
  EXPECT_EQ(z[size_t(arg)], m);
}

// The loss head's fused pass gives the two calls' numbers bit for bit, on every ISA, for rows
// of every length modulo the vector widths and with and without a cap.
TEST(TrainOps, FusedExpSumAndGradRowEqualsTheTwoCalls) {
  for (Isa isa : {Isa::kScalar, BestSupportedIsa()}) {
    SetActiveIsa(isa);
    for (int n : {1, 7, 8, 15, 16, 17, 31, 1003}) {
      for (float cap : {0.f, 30.f}) {
        auto z = Random(n, 11 + n, 5.f);
        const float m = *std::max_element(z.begin(), z.end());
        std::vector<float> two = z, fused = z;
        const double s_two = SumExpMinus(two.data(), n, m);
        CrossEntropyGradRow(two.data(), n, m, -1, cap, 1.f);
        const double s_fused = SumExpMinusAndGradRow(fused.data(), n, m, cap);
        EXPECT_EQ(s_fused, s_two) << "n " << n << " cap " << cap;
        for (int j = 0; j < n; ++j) ASSERT_EQ(fused[size_t(j)], two[size_t(j)]) << "n " << n << " j " << j;
      }
    }
  }
  SetActiveIsa(BestSupportedIsa());
}

// The vector argmax gives the scalar loop's first largest value and index, ties included.
TEST(TrainOps, RowMaxArgIsTheFirstLargestOnEveryIsa) {
  for (int n : {1, 7, 8, 9, 16, 17, 100, 1003}) {
    for (int ties = 0; ties < 2; ++ties) {
      auto z = Random(n, 3 + n, 5.f);
      if (ties) {
        for (float& v : z) v = std::round(v);  // many equal values, the largest repeated
      }
      int64_t want = 0;
      for (int j = 1; j < n; ++j) {
        if (z[size_t(j)] > z[size_t(want)]) want = j;
      }
      for (Isa isa : {Isa::kScalar, BestSupportedIsa()}) {
        SetActiveIsa(isa);
        int64_t arg = -1;
        EXPECT_EQ(RowMaxArg(z.data(), n, &arg), z[size_t(want)]) << n;
        EXPECT_EQ(arg, want) << "n " << n << " ties " << ties;
      }
    }
  }
  SetActiveIsa(BestSupportedIsa());
}

TEST(TrainOps, CounterUniformIsUniformAndDeterministic) {
  double sum = 0;
  int below_tenth = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float u = CounterUniform(42, uint64_t(i));
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    sum += u;
    below_tenth += u < 0.1f;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(double(below_tenth) / n, 0.1, 0.003);
  EXPECT_EQ(CounterUniform(42, 7), CounterUniform(42, 7));
  EXPECT_NE(CounterUniform(42, 7), CounterUniform(43, 7));
  EXPECT_NE(MixKey(1, 2), MixKey(2, 1));
}

}  // namespace
}  // namespace gk
