// The token race's parts against independent definitions: Philox4x32-10 against Random123's
// known-answer vectors, the survivors against a softmax in double, and the draws' frequencies
// against the renormalised softmax they sample.
#include "kernels/token_pick.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace gk {
namespace {

// Random123's kat_vectors, the three "philox4x32 10" lines: counter, key, expected output.
TEST(TokenPick, PhiloxMatchesRandom123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    Philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.want[i]) << "word " << i << " of counter " << std::hex << k.ctr[0];
  }
}

TEST(TokenPick, OrderKeyOrdersAsTheFloatsAndRoundTrips) {
  const std::vector<float> xs = {-INFINITY, -3e38f, -2.5f, -1e-30f, 0.f, 1e-30f, 1.f, 1.0000001f, 7e20f, INFINITY};
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(LogitOfOrderKey(LogitOrderKey(xs[i])), xs[i]);
    if (i > 0) {
      EXPECT_LT(LogitOrderKey(xs[i - 1]), LogitOrderKey(xs[i])) << xs[i - 1] << " vs " << xs[i];
    }
  }
  EXPECT_EQ(LogitOrderKey(-0.f), LogitOrderKey(0.f));  // equal logits, cut by index
}

TEST(TokenPick, UniformsLieInsideTheOpenIntervalWithMeanOneHalf) {
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float u = RaceUniform(12345, i);
    ASSERT_GT(u, 0.f);
    ASSERT_LT(u, 1.f);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NE(RaceUniform(1, 0), RaceUniform(2, 0));  // the key matters
  EXPECT_NE(RaceUniform(1, int64_t(1) << 32), RaceUniform(1, 0));  // so do the counter's high bits
}

// Survivors against a softmax computed here in double: the k largest logits (ties by index),
// then the shortest run reaching top_p of their probability.
TEST(TokenPick, SurvivorsAreTheTopKThenTheNucleus) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> x(500);
  for (float& v : x) v = std::round(nd(rng) * 8.f) / 8.f;  // many equal logits
  for (int top_k : {0, 1, 17, 499, 500, 10000}) {
    for (float top_p : {1.f, 0.95f, 0.5f, 1e-6f}) {
      const TokenPick p{0.8f, top_k, top_p, 0};
      const std::vector<int32_t> got = TokenPickSurvivors(x.data(), int64_t(x.size()), p);
      std::vector<int32_t> order(x.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[size_t(a)] > x[size_t(b)]; });
      if (top_k > 0 && size_t(top_k) < order.size()) order.resize(size_t(top_k));
      double total = 0;
      for (int32_t i : order) total += std::exp((double(x[size_t(i)]) - double(x[size_t(order[0])])) / 0.8);
      size_t cut = 0;
      double mass = 0;
      while (cut < order.size() && mass < double(top_p) * total * (1 - 1e-9)) {
        mass += std::exp((double(x[size_t(order[cut])]) - double(x[size_t(order[0])])) / 0.8);
        ++cut;
      }
      if (top_p < 1.f) order.resize(std::max<size_t>(cut, 1));
      EXPECT_EQ(got, order) << "top_k " << top_k << ", top_p " << top_p;
    }
  }
}

TEST(TokenPick, GreedyIsTheFirstLargestLogit) {
  const std::vector<float> x = {0.5f, 3.f, -1.f, 3.f, 2.f};
  EXPECT_EQ(PickTokenReference(x.data(), 5, TokenPick{0.f, 2, 0.5f, 99}), 1);
}

// Draws over many keys sample the softmax of logits / T renormalised over the survivors:
// every frequency within five standard deviations, and no token outside the survivors.
TEST(TokenPick, DrawsFollowTheRenormalisedSoftmax) {
  const std::vector<float> x = {1.f, 2.5f, -0.5f, 2.f, 0.25f, 3.f, -4.f, 1.5f};
  const float T = 0.7f;
  const int draws = 60000;
  for (const TokenPick& shape : {TokenPick{T, 0, 1.f, 0}, TokenPick{T, 5, 1.f, 0}, TokenPick{T, 0, 0.8f, 0},
                                 TokenPick{T, 4, 0.9f, 0}}) {
    const std::vector<int32_t> survivors = TokenPickSurvivors(x.data(), int64_t(x.size()), shape);
    std::map<int32_t, double> want;
    double total = 0;
    for (int32_t i : survivors) total += want[i] = std::exp(double(x[size_t(i)]) / T);
    std::map<int32_t, int> seen;
    for (int d = 0; d < draws; ++d) {
      TokenPick p = shape;
      p.key = 0x9e3779b97f4a7c15ull * uint64_t(d + 1);
      ++seen[PickTokenReference(x.data(), int64_t(x.size()), p)];
    }
    for (const auto& [token, count] : seen) EXPECT_TRUE(want.count(token)) << "token " << token << " is not a survivor";
    for (const auto& [token, w] : want) {
      const double prob = w / total, sd = std::sqrt(draws * prob * (1 - prob));
      EXPECT_NEAR(seen[token], draws * prob, 5 * sd + 1) << "token " << token << ", top_k " << shape.top_k << ", top_p "
                                                         << shape.top_p;
    }
  }
}

TEST(TokenPick, TheKeyDecides) {
  std::vector<float> x(1000);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  const TokenPick p{1.f, 0, 1.f, 42};
  EXPECT_EQ(PickTokenReference(x.data(), 1000, p), PickTokenReference(x.data(), 1000, p));
  std::map<int32_t, int> seen;
  for (uint64_t k = 0; k < 50; ++k) ++seen[PickTokenReference(x.data(), 1000, TokenPick{1.f, 0, 1.f, k})];
  EXPECT_GT(seen.size(), 30u);  // near-flat logits: 50 keys hit many tokens
}

}  // namespace
}  // namespace gk
