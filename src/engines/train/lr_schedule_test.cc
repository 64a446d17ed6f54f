#include "engines/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace gk::train {
namespace {

// The reference case (FACTS.md §1 item 3): 0 -> 1e-4 over 100 steps, cosine to 0 at 1,244.
const WarmupCosineDecay kReference{0.0, 1e-4, 100, 1244, 0.0, 1.0};

TEST(WarmupCosineDecay, StepZeroIsInitValue) {
  EXPECT_EQ(kReference(0), 0.0);
  const WarmupCosineDecay s{1e-6, 1e-3, 10, 100, 1e-5, 1.0};
  EXPECT_DOUBLE_EQ(s(0), 1e-6);
}

TEST(WarmupCosineDecay, WarmupIsLinear) {
  EXPECT_DOUBLE_EQ(kReference(1), 1e-6);
  EXPECT_DOUBLE_EQ(kReference(50), 5e-5);
  EXPECT_DOUBLE_EQ(kReference(99), 99e-6);
  const WarmupCosineDecay s{1e-6, 1e-3, 10, 100, 1e-5, 1.0};
  EXPECT_DOUBLE_EQ(s(4), 1e-6 + 0.4 * (1e-3 - 1e-6));
}

TEST(WarmupCosineDecay, PeakAtEndOfWarmup) {
  EXPECT_DOUBLE_EQ(kReference(100), 1e-4);
  const WarmupCosineDecay s{1e-6, 1e-3, 10, 100, 1e-5, 2.0};
  EXPECT_DOUBLE_EQ(s(10), 1e-3);
}

TEST(WarmupCosineDecay, CosinePhase) {
  // Half-way through the cosine part the factor is exactly 1/2.
  EXPECT_NEAR(kReference(100 + 572), 0.5e-4, 1e-18);
  const int64_t t = 300;
  const double expected = 1e-4 * 0.5 * (1 + std::cos(std::numbers::pi * double(t - 100) / 1144.0));
  EXPECT_NEAR(kReference(t), expected, 1e-18);
  // The last update (step 1,243) still has a small positive rate; step 1,244 is the end.
  EXPECT_GT(kReference(1243), 0.0);
  EXPECT_LT(kReference(1243), 1e-9);
}

TEST(WarmupCosineDecay, EndValueAtAndBeyondDecaySteps) {
  EXPECT_NEAR(kReference(1244), 0.0, 1e-20);
  EXPECT_NEAR(kReference(5000), 0.0, 1e-20);
  const WarmupCosineDecay s{0.0, 1e-3, 10, 100, 1e-5, 1.0};
  EXPECT_DOUBLE_EQ(s(100), 1e-5);
  EXPECT_DOUBLE_EQ(s(101), 1e-5);
  EXPECT_DOUBLE_EQ(s(100000), 1e-5);
  // Between peak and end the value stays within them.
  for (int64_t i = 10; i <= 100; ++i) {
    EXPECT_LE(s(i), 1e-3);
    EXPECT_GE(s(i), 1e-5);
  }
}

TEST(WarmupCosineDecay, NoWarmupStartsAtPeak) {
  const WarmupCosineDecay s{0.0, 2e-3, 0, 40, 0.0, 1.0};
  EXPECT_DOUBLE_EQ(s(0), 2e-3);
  EXPECT_DOUBLE_EQ(s(20), 1e-3);
  EXPECT_NEAR(s(40), 0.0, 1e-20);
}

TEST(WarmupCosineDecay, ExponentShapesTheCosine) {
  const WarmupCosineDecay s{0.0, 1.0, 0, 100, 0.1, 2.0};
  for (int64_t t : {0, 13, 50, 77, 100}) {
    const double c = 0.5 * (1 + std::cos(std::numbers::pi * double(t) / 100.0));
    EXPECT_NEAR(s(t), (1 - 0.1) * c * c + 0.1, 1e-15) << t;
  }
}

// optax writes end_value as alpha = end / peak; with peak 0 it uses alpha 0, so the cosine
// part is 0 whatever end_value says.
TEST(WarmupCosineDecay, ZeroPeakFollowsOptax) {
  const WarmupCosineDecay s{0.0, 0.0, 5, 20, 1e-3, 1.0};
  EXPECT_EQ(s(10), 0.0);
  EXPECT_EQ(s(30), 0.0);
}

// optax raises for decay_steps <= warmup_steps; we end at end_value after the warm-up.
TEST(WarmupCosineDecay, ScheduleShorterThanWarmup) {
  const WarmupCosineDecay s{0.0, 1e-3, 10, 5, 1e-6, 1.0};
  EXPECT_DOUBLE_EQ(s(5), 5e-4);
  EXPECT_DOUBLE_EQ(s(10), 1e-6);
  EXPECT_DOUBLE_EQ(s(50), 1e-6);
}

TEST(WarmupCosineDecay, NegativeStepIsStepZero) { EXPECT_EQ(kReference(-3), kReference(0)); }

}  // namespace
}  // namespace gk::train
