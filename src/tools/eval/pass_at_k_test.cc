#include "tools/eval/pass_at_k.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace gk::eval {
namespace {

// Exact C(n, k) for small n.
uint64_t Binomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  uint64_t r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;  // stays an integer at every step
  return r;
}

TEST(PassAtKTest, HandComputedCases) {
  EXPECT_EQ(PassAtK(5, 0, 1), 0.0);
  EXPECT_EQ(PassAtK(5, 0, 5), 0.0);
  EXPECT_EQ(PassAtK(5, 5, 1), 1.0);
  EXPECT_EQ(PassAtK(5, 5, 5), 1.0);
  EXPECT_DOUBLE_EQ(PassAtK(5, 1, 1), 0.2);
  EXPECT_DOUBLE_EQ(PassAtK(5, 3, 1), 0.6);
  EXPECT_EQ(PassAtK(5, 2, 5), 1.0);  // n - c = 3 < k: every 5-subset has a pass
  EXPECT_EQ(PassAtK(5, 1, 5), 1.0);
  EXPECT_DOUBLE_EQ(PassAtK(10, 3, 2), 1.0 - 21.0 / 45.0);  // 1 - C(7,2)/C(10,2)
  EXPECT_DOUBLE_EQ(PassAtK(1, 1, 1), 1.0);
  EXPECT_EQ(PassAtK(1, 0, 1), 0.0);
}

TEST(PassAtKTest, PassAtOneIsThePassRate) {
  for (int n = 1; n <= 20; ++n)
    for (int c = 0; c <= n; ++c) EXPECT_NEAR(PassAtK(n, c, 1), static_cast<double>(c) / n, 1e-12) << n << " " << c;
}

TEST(PassAtKTest, ProductFormMatchesExactBinomials) {
  for (int n = 1; n <= 12; ++n) {
    for (int c = 0; c <= n; ++c) {
      for (int k = 1; k <= n; ++k) {
        const double exact = 1.0 - static_cast<double>(Binomial(n - c, k)) / static_cast<double>(Binomial(n, k));
        EXPECT_NEAR(PassAtK(n, c, k), exact, 1e-12) << "n=" << n << " c=" << c << " k=" << k;
      }
    }
  }
}

TEST(PassAtKTest, MonotoneInCAndK) {
  for (int n = 1; n <= 12; ++n) {
    for (int c = 0; c <= n; ++c) {
      for (int k = 1; k <= n; ++k) {
        const double p = PassAtK(n, c, k);
        EXPECT_LE(p, c < n ? PassAtK(n, c + 1, k) + 1e-15 : 1.0) << "n=" << n << " c=" << c << " k=" << k;
        EXPECT_LE(p, k < n ? PassAtK(n, c, k + 1) + 1e-15 : 1.0) << "n=" << n << " c=" << c << " k=" << k;
        EXPECT_GE(p, 0.0);
      }
    }
  }
}

TEST(PassAtKTest, OutsideTheDomainIsNaN) {
  EXPECT_TRUE(std::isnan(PassAtK(5, 0, 6)));  // k > n: not reported (the reference formula would say 1)
  EXPECT_TRUE(std::isnan(PassAtK(5, 2, 0)));
  EXPECT_TRUE(std::isnan(PassAtK(0, 0, 1)));
  EXPECT_TRUE(std::isnan(PassAtK(5, 6, 1)));
  EXPECT_TRUE(std::isnan(PassAtK(5, -1, 1)));
}

}  // namespace
}  // namespace gk::eval
