#include "tools/bench_serve/sweep.h"

#include <gtest/gtest.h>

#include <limits>

namespace gk::bench {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

SweepPoint Point(int len, double rate, double tput, double peak, double ttft) {
  SweepPoint p;
  p.input_len = len;
  p.output_len = 256;
  p.request_rate = rate;
  p.result = {{"output_throughput", tput}, {"max_output_tokens_per_s", peak}, {"median_ttft_ms", ttft},
              {"failed", 0}, {"ttfts", {1, 2}}};
  return p;
}

TEST(SweepTest, SaturationIsWhereThroughputStopsGrowing) {
  // Doubling the rate doubles throughput up to 8; 8 -> 16 adds 5 %: saturated at 8.
  std::vector<SweepPoint> pts = {Point(1024, 16, 1050, 1300, 900), Point(1024, 1, 130, 200, 40),
                                 Point(1024, 2, 260, 300, 41), Point(1024, 4, 520, 600, 45),
                                 Point(1024, 8, 1000, 1200, 60), Point(1024, kInf, 1080, 1400, 5000)};
  const auto s = SummarizeSweep(pts);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_TRUE(s[0].saturation_rate.has_value());
  EXPECT_EQ(*s[0].saturation_rate, 8);
  EXPECT_EQ(s[0].ttft_at_saturation_ms, 60);
  EXPECT_EQ(s[0].ttft_after_saturation_ms, 900);
  EXPECT_EQ(s[0].best_output_throughput, 1080);
  EXPECT_TRUE(std::isinf(s[0].best_rate));
  EXPECT_EQ(s[0].peak_output_tokens_per_s, 1400);
}

TEST(SweepTest, NotReachedWhileThroughputGrows) {
  const auto s = SummarizeSweep({Point(512, 1, 100, 100, 10), Point(512, 2, 200, 210, 10), Point(512, 4, 390, 400, 11)});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].saturation_rate.has_value());
}

TEST(SweepTest, OneSummaryPerInputLength) {
  const auto s = SummarizeSweep({Point(512, 1, 100, 1, 1), Point(4096, 1, 50, 1, 1), Point(512, 2, 105, 1, 1),
                                 Point(4096, 2, 100, 1, 1)});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].input_len, 512);
  EXPECT_EQ(*s[0].saturation_rate, 1);  // 100 -> 105 is < 10 %
  EXPECT_EQ(s[1].input_len, 4096);
  EXPECT_FALSE(s[1].saturation_rate.has_value());
}

TEST(SweepTest, JsonKeepsScalarsAndSummary) {
  auto j = SweepJson({Point(512, 1, 100, 120, 10), Point(512, kInf, 104, 130, 50)}, {{"label", "GPU"}});
  EXPECT_EQ(j["gemmakit_sweep"], 1);
  EXPECT_EQ(j["label"], "GPU");
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][1]["request_rate"], "inf");
  EXPECT_EQ(j["points"][0]["output_throughput"], 100);
  EXPECT_FALSE(j["points"][0].contains("ttfts"));  // per-request arrays stay in the point files
  EXPECT_EQ(j["summary"][0]["saturation_request_rate"], 1);
  EXPECT_EQ(j["summary"][0]["best_output_throughput_request_rate"], "inf");
  EXPECT_NE(FormatSweep({Point(512, 1, 100, 120, 10)}).find("saturation not reached"), std::string::npos);
}

}  // namespace
}  // namespace gk::bench
