#include "tools/bench_serve/result_report.h"

#include <gtest/gtest.h>

#include <limits>

#include "tools/bench_serve/openai_stream.h"

namespace gk::bench {
namespace {

RunResult TwoRequests() {
  RunResult run;
  run.duration_s = 2.0;
  for (int i = 0; i < 2; ++i) {
    RequestOutcome o;
    o.success = true;
    o.prompt_len = 10;
    o.output_tokens = 3;
    o.ttft = 0.1 * (i + 1);
    o.itl = {0.05, 0.05};
    o.latency = o.ttft + 0.1;
    o.start_time = 100 + i;
    o.queue_time = 0.5 * i;
    run.outcomes.push_back(o);
  }
  run.sse_messages = 10;
  run.client_cpu_s = 0.001;
  return run;
}

TEST(ResultReportTest, SummaryHasVllmsLayout) {
  PointSetup s;
  s.request_rate = 4;
  s.max_concurrency = 8;
  s.percentiles = {99, 99.9};
  const RunResult run = TwoRequests();
  const BenchMetrics m = CalculateMetrics(run.outcomes, run.duration_s, s.percentiles, {});
  const std::string text = FormatSummary(m, run, s);
  EXPECT_EQ(text.substr(0, 51), "============ Serving Benchmark Result ============\n");
  EXPECT_NE(text.find("Successful requests:                     2         \n"), std::string::npos) << text;
  EXPECT_NE(text.find("Maximum request concurrency:             8         \n"), std::string::npos);
  EXPECT_NE(text.find("Request rate configured (RPS):           4.00      \n"), std::string::npos);
  EXPECT_NE(text.find("Peak concurrent requests:                1.00      \n"), std::string::npos);
  EXPECT_NE(text.find("---------------Time to First Token----------------\n"), std::string::npos);
  EXPECT_NE(text.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos);
  EXPECT_NE(text.find("Mean TTFT (ms):                          150.00    \n"), std::string::npos);
  EXPECT_NE(text.find("P99.9 ITL (ms):"), std::string::npos);
  EXPECT_EQ(text.find("E2EL"), std::string::npos);               // not asked for
  EXPECT_EQ(text.find("Client Queue"), std::string::npos);       // opt-in, as vLLM
  EXPECT_EQ(text.find("goodput"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 51), std::string(50, '=') + "\n");
}

TEST(ResultReportTest, JsonUsesVllmNames) {
  PointSetup s;
  s.date = "20261203-101500";
  s.endpoint_type = "openai";
  s.model_id = "org/gemma-4-31b";
  s.num_prompts = 2;
  s.request_rate = std::numeric_limits<double>::infinity();
  s.max_concurrency = 4;
  s.percentile_metrics = {"ttft", "e2el", "client_queue_time"};
  s.metadata = {{"hardware", "v6e-8"}};
  const RunResult run = TwoRequests();
  const BenchMetrics m = CalculateMetrics(run.outcomes, run.duration_s, s.percentiles, {});
  const auto j = ResultJson(m, run, s);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["hardware"], "v6e-8");
  EXPECT_EQ(j["max_concurrency"], 4);
  EXPECT_TRUE(j["request_goodput"].is_null());
  EXPECT_DOUBLE_EQ(j["mean_ttft_ms"].get<double>(), 150);
  EXPECT_DOUBLE_EQ(j["p99_e2el_ms"].get<double>(), 299);  // 200 + 0.99 * 100 ms
  EXPECT_DOUBLE_EQ(j["median_client_queue_time_ms"].get<double>(), 250);
  EXPECT_FALSE(j.contains("mean_tpot_ms"));
  EXPECT_FALSE(j.contains("ttfts"));  // only with --save-detailed
  EXPECT_EQ(j["latencies"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["gemmakit"]["client"]["cpu_per_sse_message_us"].get<double>(), 100);
  EXPECT_EQ(ResultFileName(s), "openai-infqps-concurrency4-gemma-4-31b-20261203-101500.json");
  s.request_rate = 4;
  s.max_concurrency = 0;
  s.label = "tpu";
  EXPECT_EQ(ResultFileName(s), "tpu-4.0qps-gemma-4-31b-20261203-101500.json");
  EXPECT_EQ(RateText(0.5), "0.5");
}

TEST(OpenAiRequestTest, BodiesAsVllmSendsThem) {
  StreamRequestSpec spec;
  spec.model = "m";
  spec.prompt = "hi";
  spec.max_tokens = 7;
  spec.ignore_eos = true;
  spec.request_id = "bench-1";
  spec.api_key = "k";
  SamplingFlags f;
  f.temperature = 0;
  f.extra_body = {{"top_k", 5}, {"seed", 3}};
  HttpRequest r = BuildStreamRequest(spec, f);
  auto body = nlohmann::json::parse(r.body);
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(body["prompt"], "hi");
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["seed"], 3);
  bool auth = false, id = false;
  for (const auto& [k, v] : r.headers) {
    auth |= k == "Authorization" && v == "Bearer k";
    id |= k == "x-request-id" && v == "bench-1";
  }
  EXPECT_TRUE(auth && id);
  spec.endpoint = ApiEndpoint::kChatCompletions;
  body = nlohmann::json::parse(BuildStreamRequest(spec, {}).body);
  EXPECT_EQ(body["messages"][0]["content"], "hi");
  EXPECT_EQ(body["max_completion_tokens"], 7);
  EXPECT_FALSE(body.contains("max_tokens"));
  EXPECT_FALSE(body.contains("temperature"));  // not sent unless asked (vLLM after PR #32723)
}

}  // namespace
}  // namespace gk::bench
