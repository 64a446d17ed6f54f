#include "tools/bench_serve/arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gk::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(BenchArrivalsTest, GammaGapsHaveMeanOneOverRateAndVarianceOneOverRateSquaredBurstiness) {
  const int n = 200000;
  const double rate = 4.0;
  for (double b : {0.5, 1.0, 4.0}) {
    const std::vector<double> g = GammaGaps(n, rate, b, /*seed=*/42);
    ASSERT_EQ(g.size(), size_t(n));
    double sum = 0;
    for (double x : g) sum += x;
    const double mean = sum / n;
    double sq = 0;
    for (double x : g) sq += (x - mean) * (x - mean);
    const double var = sq / n;
    // Standard errors at n = 200k: mean <= 0.32%, variance <= 0.84% (b = 0.5, kurtosis 6/b).
    EXPECT_NEAR(mean, 1 / rate, 0.02 / rate) << "burstiness " << b;
    EXPECT_NEAR(var, 1 / (rate * rate * b), 0.02 / (rate * rate * b)) << "burstiness " << b;
    EXPECT_GT(*std::min_element(g.begin(), g.end()), 0) << "burstiness " << b;
  }
}

TEST(BenchArrivalsTest, GapsAreDeterministicPerSeed) {
  EXPECT_EQ(GammaGaps(100, 2, 1, 7), GammaGaps(100, 2, 1, 7));
  EXPECT_NE(GammaGaps(100, 2, 1, 7), GammaGaps(100, 2, 1, 8));
  EXPECT_EQ(ArrivalOffsets(100, 2, 0.5, 7), ArrivalOffsets(100, 2, 0.5, 7));
}

TEST(BenchArrivalsTest, OffsetsAccumulateGapsAndEndAtExactlyNOverRate) {
  for (int n : {1, 2, 3, 30, 1000}) {
    for (double rate : {0.7, 3.0, 64.0}) {
      const std::vector<double> gaps = GammaGaps(n, rate, 1.0, 3);
      const std::vector<double> t = ArrivalOffsets(n, rate, 1.0, 3);
      ASSERT_EQ(t.size(), size_t(n));
      EXPECT_EQ(t.back(), n / rate) << n << " requests at " << rate;  // exactly
      EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
      // The first request waits one (scaled) gap too, and every offset keeps its share.
      double cum = 0, total = 0;
      for (double g : gaps) total += g;
      for (int i = 0; i < n; ++i) {
        cum += gaps[i];
        EXPECT_NEAR(t[i], cum / total * (n / rate), 1e-9 * (n / rate)) << i;
      }
      EXPECT_GT(t[0], 0);
    }
  }
}

TEST(BenchArrivalsTest, InfiniteRateSendsEverythingAtZero) {
  EXPECT_EQ(GammaGaps(5, kInf, 1.0, 0), std::vector<double>(5, 0.0));
  EXPECT_EQ(ArrivalOffsets(5, kInf, 1.0, 0), std::vector<double>(5, 0.0));
  EXPECT_EQ(ArrivalOffsets(5, kInf, 0.25, 0), std::vector<double>(5, 0.0));
  EXPECT_EQ(ArrivalOffsets(5, kInf, kInf, 0), std::vector<double>(5, 0.0));
}

TEST(BenchArrivalsTest, InfiniteBurstinessIsAConstantGap) {
  EXPECT_EQ(GammaGaps(4, 8.0, kInf, 0), std::vector<double>(4, 0.125));
  const std::vector<double> t = ArrivalOffsets(4, 8.0, kInf, 0);
  EXPECT_EQ(t, (std::vector<double>{0.125, 0.25, 0.375, 0.5}));
  const std::vector<double> u = ArrivalOffsets(10, 3.0, kInf, 0);
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(u[i], (i + 1) / 3.0, 1e-12);
  EXPECT_EQ(u.back(), 10 / 3.0);
}

TEST(BenchArrivalsTest, NoRequestsNoOffsets) {
  EXPECT_TRUE(ArrivalOffsets(0, 1.0, 1.0, 0).empty());
  EXPECT_TRUE(GammaGaps(0, 1.0, 1.0, 0).empty());
}

}  // namespace
}  // namespace gk::bench
