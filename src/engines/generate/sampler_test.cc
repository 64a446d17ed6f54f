#include "engines/generate/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace gk {
namespace {

TEST(Sampler, GreedyPicksArgmax) {
  Sampler s({0.f, 0, 1.f, 1});
  const std::vector<float> logits = {0.1f, 3.f, -1.f, 2.9f};
  EXPECT_EQ(s.Sample(logits.data(), 4), 1);
}

TEST(Sampler, SameSeedSameDraws) {
  std::vector<float> logits(5000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  Sampler a({1.f, 0, 0.9f, 42}), b({1.f, 0, 0.9f, 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.Sample(logits.data(), 5000), b.Sample(logits.data(), 5000));
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampler k2({1.f, 2, 1.f, 7});
  Sampler p70({1.f, 0, 0.7f, 7});  // 0.5 + 0.3 reaches 0.7: tokens 0 and 1 only
  std::map<int, int> seen_k, seen_p;
  for (int i = 0; i < 2000; ++i) {
    seen_k[k2.Sample(logits.data(), 4)]++;
    seen_p[p70.Sample(logits.data(), 4)]++;
  }
  EXPECT_EQ(seen_k.size(), 2u);
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_NEAR(seen_k[0] / 2000.0, 0.5 / 0.8, 0.05);  // renormalised over the survivors
}

// The fast path (nucleus inside the best 1,024 of a large vocabulary) matches the
// distribution of the plain definition.
TEST(Sampler, LargeVocabularyNucleusHasTheRightMass) {
  std::vector<float> logits(262144, -30.f);
  logits[10] = 5.f;
  logits[20] = 4.f;
  Sampler s({1.f, 0, 0.95f, 3});
  std::map<int, int> seen;
  for (int i = 0; i < 3000; ++i) seen[s.Sample(logits.data(), 262144)]++;
  EXPECT_EQ(seen.size(), 2u);
  const double p10 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(seen[10] / 3000.0, p10, 0.03);
}

}  // namespace
}  // namespace gk
