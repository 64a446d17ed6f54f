#include "server/prometheus.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gk::server {
namespace {

TEST(PrometheusTest, FormatsValuesLikePrometheusClient) {
  EXPECT_EQ(FormatPromValue(0), "0.0");
  EXPECT_EQ(FormatPromValue(3), "3.0");
  EXPECT_EQ(FormatPromValue(0.25), "0.25");
  EXPECT_EQ(FormatPromValue(0.001), "0.001");
  EXPECT_EQ(FormatPromValue(2560), "2560.0");
  EXPECT_EQ(FormatPromValue(1e-05), "1e-05");
  EXPECT_EQ(FormatPromValue(100000), "100000.0");
  EXPECT_EQ(FormatPromValue(0.0001), "0.0001");
  EXPECT_EQ(FormatPromValue(123.456), "123.456");
  EXPECT_EQ(FormatPromValue(-2.5), "-2.5");
  EXPECT_EQ(FormatPromValue(1e16), "1e+16");
  EXPECT_EQ(FormatPromValue(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatPromValue(8.872599983078544e-05), "8.872599983078544e-05");
  EXPECT_EQ(FormatPromValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(PrometheusTest, HistogramIsCumulativeWithInfSumAndCount) {
  Histogram h({0.1, 1.0, 10.0});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Get();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4, 5}));  // le=0.1 counts 0.1 itself
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 55.65);

  PrometheusWriter w;
  w.AddHistogram("vllm:x_seconds", "X.", {{"model_name", "m"}}, s);
  EXPECT_EQ(w.text(),
            "# HELP vllm:x_seconds X.\n"
            "# TYPE vllm:x_seconds histogram\n"
            "vllm:x_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2.0\n"
            "vllm:x_seconds_bucket{model_name=\"m\",le=\"1.0\"} 3.0\n"
            "vllm:x_seconds_bucket{model_name=\"m\",le=\"10.0\"} 4.0\n"
            "vllm:x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 5.0\n"
            "vllm:x_seconds_count{model_name=\"m\"} 5.0\n"
            "vllm:x_seconds_sum{model_name=\"m\"} 55.65\n");
}

TEST(PrometheusTest, CountersAndGauges) {
  PrometheusWriter w;
  w.AddGauge("vllm:num_requests_running", "Running.", {{{{"model_name", "m"}}, 2}});
  w.AddCounter("vllm:request_success_total", "Done.",
               {{{{"model_name", "m"}, {"finished_reason", "stop"}}, 3}, {{{"model_name", "m"}, {"finished_reason", "length"}}, 0}});
  w.AddGauge("up", "Unlabelled.", {{{}, 1}});
  EXPECT_EQ(w.text(),
            "# HELP vllm:num_requests_running Running.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            "vllm:num_requests_running{model_name=\"m\"} 2.0\n"
            "# HELP vllm:request_success_total Done.\n"
            "# TYPE vllm:request_success_total counter\n"
            "vllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 3.0\n"
            "vllm:request_success_total{model_name=\"m\",finished_reason=\"length\"} 0.0\n"
            "# HELP up Unlabelled.\n"
            "# TYPE up gauge\n"
            "up 1.0\n");
}

TEST(PrometheusTest, VllmBucketFamilies) {
  EXPECT_EQ(TtftBuckets().size(), 22u);
  EXPECT_EQ(TtftBuckets().front(), 0.001);
  EXPECT_EQ(TtftBuckets().back(), 2560.0);
  EXPECT_EQ(TokenLatencyBuckets().size(), 19u);
  EXPECT_EQ(RequestLatencyBuckets().size(), 21u);
  for (const auto* b : {&TtftBuckets(), &TokenLatencyBuckets(), &RequestLatencyBuckets()}) {
    EXPECT_TRUE(std::is_sorted(b->begin(), b->end()));
  }
}

}  // namespace
}  // namespace gk::server
