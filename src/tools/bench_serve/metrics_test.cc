#include "tools/bench_serve/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gk::bench {
namespace {

TEST(BenchMetricsTest, PercentileIsNumpyLinear) {
  const std::vector<double> v = {4, 1, 3, 2};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);   // rank 2.97: 3 + 0.97 * (4 - 3)
  EXPECT_EQ(Percentile(v, 99), 3.9699999999999998);  // numpy's bits: 4 - 1 * (1 - 0.97)
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 25), 1.75);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({}, 99), 0);
  // Values numpy 1.24 printed with repr() for np.percentile(x, p), x = [0.1, 0.7, 0.2, 0.9, 0.35].
  const std::vector<double> x = {0.1, 0.7, 0.2, 0.9, 0.35};
  EXPECT_EQ(Percentile(x, 99), 0.892);
  EXPECT_EQ(Percentile(x, 90), 0.8200000000000001);
  EXPECT_EQ(Percentile(x, 37.5), 0.275);
}

TEST(BenchMetricsTest, StatsAreMillisecondsWithPopulationStd) {
  const MetricStats s = ComputeStats({1, 2, 3, 4}, {99, 50});
  EXPECT_DOUBLE_EQ(s.mean_ms, 2500);
  EXPECT_DOUBLE_EQ(s.median_ms, 2500);
  EXPECT_NEAR(s.std_ms, 1118.033988749895, 1e-9);  // sqrt(1.25) s; ddof 1 would be 1290.99
  ASSERT_EQ(s.percentiles_ms.size(), 2u);
  EXPECT_EQ(s.percentiles_ms[0].first, 99);  // in the order asked
  EXPECT_DOUBLE_EQ(s.percentiles_ms[0].second, 3970);
  EXPECT_EQ(s.percentiles_ms[1].first, 50);
  EXPECT_DOUBLE_EQ(s.percentiles_ms[1].second, 2500);

  EXPECT_DOUBLE_EQ(ComputeStats({0.3, 0.1, 0.2}, {}).median_ms, 200);  // odd count: the middle one
  EXPECT_EQ(ComputeStats({0.25}, {}).std_ms, 0);
}

TEST(BenchMetricsTest, EmptyStatsAreZeroIncludingPercentiles) {
  const MetricStats s = ComputeStats({}, {99, 90});
  EXPECT_EQ(s.mean_ms, 0);
  EXPECT_EQ(s.median_ms, 0);
  EXPECT_EQ(s.std_ms, 0);
  ASSERT_EQ(s.percentiles_ms.size(), 2u);
  EXPECT_EQ(s.percentiles_ms[0], std::make_pair(99.0, 0.0));
  EXPECT_EQ(s.percentiles_ms[1], std::make_pair(90.0, 0.0));
}

TEST(BenchMetricsTest, MeanSumsPairwiseLikeNumpy) {
  // 1000 x 0.1: naive left-to-right summation gives 99.9999999999986; numpy's pairwise sum
  // gives 100.00000000000001 (numpy 1.24: np.mean([0.1] * 1000) == 0.10000000000000002).
  const MetricStats s = ComputeStats(std::vector<double>(1000, 0.1), {});
  EXPECT_EQ(s.mean_ms, 0.10000000000000002 * 1000);
}

TEST(BenchMetricsTest, ParsesGoodputWords) {
  auto all = ParseGoodput({"ttft:500", "tpot:50.5", "e2el:2000"});
  ASSERT_TRUE(all.ok()) << all.message();
  EXPECT_EQ(all->ttft_ms, 500);
  EXPECT_EQ(all->tpot_ms, 50.5);
  EXPECT_EQ(all->e2el_ms, 2000);
  EXPECT_TRUE(all->any());

  auto some = ParseGoodput({"e2el:1e3", "e2el:0"});  // a repeated name keeps the last value
  ASSERT_TRUE(some.ok()) << some.message();
  EXPECT_FALSE(some->ttft_ms.has_value());
  EXPECT_FALSE(some->tpot_ms.has_value());
  EXPECT_EQ(some->e2el_ms, 0);

  auto none = ParseGoodput({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->any());
}

TEST(BenchMetricsTest, RejectsBadGoodputWords) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ttft", "KEY:VALUE"},           {"ttft:", "not a number"},   {"ttft:abc", "not a number"},
      {"ttft:5ms", "not a number"},    {"ttft:-1", ">= 0"},         {"ttft:nan", "not a number"},
      {"itl:50", "unknown metric \"itl\""}, {"ttft:1:2", "KEY:VALUE"}, {"TTFT:1", "unknown metric"},
  };
  for (const auto& [word, why] : cases) {
    auto r = ParseGoodput({"tpot:10", word});
    ASSERT_FALSE(r.ok()) << word;
    EXPECT_NE(r.message().find(word), std::string::npos) << r.message();
    EXPECT_NE(r.message().find(why), std::string::npos) << r.message();
    EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  }
}

// The hand-computed run. All times are binary fractions so sums and ties are exact.
//  0: failed (started earlier than everyone, has timings): must be ignored except for counting.
//  1: 1 output token, [100, 100.25): out of TPOT, tpot 0 for goodput.
//  2: 4 output tokens, [100.25, 101.75): starts exactly when 1 ends -> never concurrent with it.
std::vector<RequestOutcome> ThreeRequests() {
  RequestOutcome failed;
  failed.success = false;
  failed.error = "HTTP 500";
  failed.prompt_len = 100;
  failed.output_tokens = 7;
  failed.ttft = 0.125;
  failed.itl = {9.0};
  failed.latency = 9.5;
  failed.start_time = 50;

  RequestOutcome one;
  one.success = true;
  one.prompt_len = 10;
  one.output_tokens = 1;
  one.ttft = 0.25;
  one.latency = 0.25;
  one.start_time = 100;

  RequestOutcome four;
  four.success = true;
  four.prompt_len = 20;
  four.output_tokens = 4;
  four.ttft = 0.5;
  four.itl = {0.25, 0.25, 0.5};
  four.latency = 1.5;
  four.start_time = 100.25;
  return {failed, one, four};
}

TEST(BenchMetricsTest, CalculatesEveryFieldOfAHandComputedRun) {
  const BenchMetrics m = CalculateMetrics(ThreeRequests(), 2.0, {99, 50}, GoodputSlo{});
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);   // successful prompts only
  EXPECT_EQ(m.total_output, 5);   // 0 + 1 + 4
  EXPECT_EQ(m.actual_output_lens, (std::vector<int>{0, 1, 4}));
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 2.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 17.5);
  EXPECT_EQ(m.request_goodput, 0);  // no SLO given

  // TTFT over [0.25, 0.5].
  EXPECT_DOUBLE_EQ(m.ttft.mean_ms, 375);
  EXPECT_DOUBLE_EQ(m.ttft.median_ms, 375);
  EXPECT_DOUBLE_EQ(m.ttft.std_ms, 125);
  EXPECT_DOUBLE_EQ(m.ttft.percentiles_ms[0].second, 497.5);
  EXPECT_DOUBLE_EQ(m.ttft.percentiles_ms[1].second, 375);
  // TPOT: only request 2, (1.5 - 0.5) / 3.
  EXPECT_DOUBLE_EQ(m.tpot.mean_ms, 1000.0 / 3);
  EXPECT_DOUBLE_EQ(m.tpot.median_ms, 1000.0 / 3);
  EXPECT_EQ(m.tpot.std_ms, 0);
  EXPECT_DOUBLE_EQ(m.tpot.percentiles_ms[0].second, 1000.0 / 3);
  // ITL pooled over requests: [0.25, 0.25, 0.5] (the failed request's 9.0 is not in it).
  EXPECT_DOUBLE_EQ(m.itl.mean_ms, 1000.0 / 3);
  EXPECT_DOUBLE_EQ(m.itl.median_ms, 250);
  EXPECT_NEAR(m.itl.std_ms, 1000 * std::sqrt(1.0 / 72), 1e-9);
  EXPECT_DOUBLE_EQ(m.itl.percentiles_ms[0].second, 495);  // rank 1.98
  EXPECT_DOUBLE_EQ(m.itl.percentiles_ms[1].second, 250);
  // E2EL over [0.25, 1.5].
  EXPECT_DOUBLE_EQ(m.e2el.mean_ms, 875);
  EXPECT_DOUBLE_EQ(m.e2el.median_ms, 875);
  EXPECT_DOUBLE_EQ(m.e2el.std_ms, 625);
  EXPECT_DOUBLE_EQ(m.e2el.percentiles_ms[0].second, 1487.5);

  // Bins from the earliest successful start (100, not the failed 50); ceil(1.75) + 1 = 3 bins.
  // Token times - 100: 0.25 | 0.75, 1.0, 1.25, 1.75 -> bins [2, 3, 0].
  EXPECT_EQ(m.max_output_tokens_per_s, 3);
  // Request 1 leaves at 100.25 as request 2 arrives: departures first, so never 2 at once.
  EXPECT_EQ(m.max_concurrent_requests, 1);
}

TEST(BenchMetricsTest, GoodputCountsRequestsMeetingEverySlo) {
  const std::vector<RequestOutcome> run = ThreeRequests();
  auto goodput = [&](const std::vector<std::string>& words) {
    auto slo = ParseGoodput(words);
    EXPECT_TRUE(slo.ok()) << slo.message();
    return CalculateMetrics(run, 2.0, {99}, *slo).request_goodput;
  };
  // ttft 0.25 and 0.5; tpot 0 (one token) and 1/3; e2el 0.25 and 1.5; duration 2 s.
  EXPECT_DOUBLE_EQ(goodput({"ttft:300"}), 0.5);
  EXPECT_DOUBLE_EQ(goodput({"ttft:500"}), 1.0);  // value == SLO is good
  EXPECT_DOUBLE_EQ(goodput({"ttft:0"}), 0.0);
  EXPECT_DOUBLE_EQ(goodput({"tpot:100"}), 0.5);  // the one-token request has tpot 0
  EXPECT_DOUBLE_EQ(goodput({"tpot:0"}), 0.5);
  EXPECT_DOUBLE_EQ(goodput({"tpot:400"}), 1.0);
  EXPECT_DOUBLE_EQ(goodput({"e2el:1499"}), 0.5);
  EXPECT_DOUBLE_EQ(goodput({"e2el:1500"}), 1.0);
  EXPECT_DOUBLE_EQ(goodput({"ttft:500", "tpot:300"}), 0.5);  // request 2 fails only the tpot SLO
  EXPECT_DOUBLE_EQ(goodput({"ttft:500", "tpot:400", "e2el:1500"}), 1.0);
}

TEST(BenchMetricsTest, ZeroOutputTokensCountAsOne) {
  RequestOutcome o;
  o.success = true;
  o.output_tokens = 0;  // usage missing and no tokenizer: vLLM counts 1
  o.ttft = 0.5;
  o.latency = 2.0;
  o.itl = {0.5, 0.5, 0.5};
  const BenchMetrics m = CalculateMetrics({o}, 1.0, {99}, GoodputSlo{});
  EXPECT_EQ(m.total_output, 1);
  EXPECT_EQ(m.actual_output_lens, (std::vector<int>{1}));
  EXPECT_EQ(m.tpot.mean_ms, 0);    // one token: no TPOT sample
  EXPECT_DOUBLE_EQ(m.itl.mean_ms, 500);  // the ITL list is still pooled
  EXPECT_EQ(m.max_output_tokens_per_s, 2);  // token times 0.5, 1.0, 1.5, 2.0 -> bins [1, 2, 1]
}

TEST(BenchMetricsTest, PeakConcurrencySweepsHalfOpenIntervals) {
  auto req = [](double start, double latency) {
    RequestOutcome o;
    o.success = true;
    o.output_tokens = 1;
    o.start_time = start;
    o.latency = latency;
    return o;
  };
  // [0,2) [1,3) [2,4): at t = 2 one leaves as one arrives.
  EXPECT_EQ(CalculateMetrics({req(0, 2), req(1, 2), req(2, 2)}, 4, {}, {}).max_concurrent_requests, 2);
  // [0,10) [1,2) [1.5,3): all three overlap on [1.5, 2).
  EXPECT_EQ(CalculateMetrics({req(0, 10), req(1, 1), req(1.5, 1.5)}, 10, {}, {}).max_concurrent_requests, 3);
  RequestOutcome failed = req(0.5, 100);
  failed.success = false;  // failures take no part
  EXPECT_EQ(CalculateMetrics({req(0, 1), failed, req(1, 1)}, 2, {}, {}).max_concurrent_requests, 1);
}

TEST(BenchMetricsTest, PeakTokensPerSecondUsesOneSecondBinsFromFirstStart) {
  RequestOutcome a;
  a.success = true;
  a.output_tokens = 5;
  a.start_time = 10;
  a.ttft = 0.5;
  a.itl = {0.25, 0.25, 0.0, 0.999};  // one chunk per gap: token times 10.5 10.75 11 11 11.999
  a.latency = 1.999;
  RequestOutcome b = a;
  b.start_time = 10.75;
  b.ttft = 0.25;
  b.itl = {};  // a single chunk at 11.0, whatever output_tokens says
  b.latency = 0.25;
  const BenchMetrics m = CalculateMetrics({a, b}, 2.0, {}, {});
  EXPECT_EQ(m.max_output_tokens_per_s, 4);  // bin 1 = [11, 12): 11, 11, 11.999 and b's 11
}

TEST(BenchMetricsTest, EmptyRunIsAllZeros) {
  const BenchMetrics m = CalculateMetrics({}, 0.0, {99}, GoodputSlo{});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 0);
  EXPECT_EQ(m.request_throughput, 0);  // a zero duration does not give inf or nan
  EXPECT_EQ(m.output_throughput, 0);
  EXPECT_EQ(m.ttft.percentiles_ms, (std::vector<std::pair<double, double>>{{99, 0}}));
  EXPECT_EQ(m.max_output_tokens_per_s, 0);
  EXPECT_EQ(m.max_concurrent_requests, 0);
  EXPECT_TRUE(m.actual_output_lens.empty());
}

}  // namespace
}  // namespace gk::bench
