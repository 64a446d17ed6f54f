// The client against a fake server whose timing is configured: what it measures must equal
// what was configured, and each chunk's arrival must match the time the server logged writing
// it (same clock, same process). Tolerances bound scheduling noise on a loaded 2-core machine;
// the server-log comparison is the tight one.
#include "tools/bench_serve/bench_runner.h"

#include <gtest/gtest.h>

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tools/bench_serve/fake_sse_server.h"
#include "tools/bench_serve/metrics.h"

namespace gk::bench {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

struct Fixture {
  explicit Fixture(FakeServerOptions fo) : server(std::move(fo)) {
    auto p = server.Start();
    EXPECT_TRUE(p.ok()) << p.message();
    port = p.ok() ? *p : 0;
  }
  RunOptions Options() const {
    RunOptions o;
    o.url = {"127.0.0.1", port, "", ""};
    o.model = "fake-model";
    o.request_id_prefix = "t-";
    o.ready_check_timeout_s = 5;
    return o;
  }
  FakeSseServer server;
  int port = 0;
};

std::vector<SampleRequest> Requests(int n, int tokens, const std::string& prompt = "one two three") {
  std::vector<SampleRequest> r(n);
  for (auto& s : r) {
    s.prompt = prompt;
    s.prompt_len = 99;  // replaced by usage.prompt_tokens
    s.expected_output_len = tokens;
  }
  return r;
}

// Client arrival - server write, per chunk, in ms.
std::vector<double> Delays(const RunResult& run, const std::vector<FakeRequestTrace>& traces) {
  std::vector<double> d;
  for (const auto& t : traces) {
    if (t.index < 0) continue;
    const RequestOutcome& o = run.outcomes[t.index];
    if (!o.success) continue;
    EXPECT_EQ(t.sends.size(), o.itl.size() + 1);
    double arrival = o.start_time + o.ttft;
    for (size_t k = 0; k < t.sends.size() && k <= o.itl.size(); ++k) {
      if (k) arrival += o.itl[k - 1];
      d.push_back((arrival - t.sends[k]) * 1e3);
    }
  }
  return d;
}

TEST(BenchRunnerTest, MeasuresTheConfiguredTiming) {
  FakeServerOptions fo;
  fo.ttft_s = 0.08;
  fo.itl_s = 0.02;
  Fixture f(fo);
  RunOptions o = f.Options();
  auto run = RunBenchmark(Requests(8, 16), o);
  ASSERT_TRUE(run.ok()) << run.message();
  const BenchMetrics m = CalculateMetrics(run->outcomes, run->duration_s, {50, 99}, {});
  EXPECT_EQ(m.completed, 8);
  EXPECT_EQ(m.failed, 0);
  EXPECT_EQ(m.total_output, 8 * 16);
  EXPECT_EQ(m.total_input, 8 * 3);  // usage.prompt_tokens (3 words) replaced the dataset's 99
  EXPECT_EQ(m.max_concurrent_requests, 8);
  for (const auto& out : run->outcomes) {
    ASSERT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.itl.size(), 15u);
    std::string expected;
    for (int i = 0; i < 16; ++i) expected += "tok ";
    EXPECT_EQ(out.generated_text, expected);
    // The server sleeps the configured times, so they are lower bounds; how much longer a run
    // takes depends on the machine's load, so it is printed, not asserted.
    EXPECT_GE(out.ttft, 0.08 - 0.001);
    EXPECT_GE(out.latency, 0.08 + 15 * 0.02 - 0.001);
    EXPECT_GE(out.queue_time, 0);  // no concurrency cap: dispatched on arrival
  }
  EXPECT_GE(m.ttft.median_ms, 80 - 1);
  EXPECT_GE(m.e2el.median_ms, 380 - 1);
  // TPOT is (E2EL - TTFT) / (output - 1) of each request, whatever the timing was.
  std::vector<double> tpot;
  for (const auto& out : run->outcomes) tpot.push_back((out.latency - out.ttft) / 15 * 1e3);
  EXPECT_NEAR(m.tpot.median_ms, Percentile(tpot, 50), 1e-9);
  std::printf("configured TTFT 80 ms, ITL 20 ms; measured median TTFT %.1f ms, ITL %.1f ms, TPOT %.1f ms, "
              "E2EL %.1f ms, duration %.3f s\n", m.ttft.median_ms, m.itl.median_ms, m.tpot.median_ms,
              m.e2el.median_ms, run->duration_s);
  // All 8 start together and end >= 380 ms later: throughput = 128 tokens over the duration.
  EXPECT_GE(run->duration_s, 0.38 - 0.001);
  EXPECT_NEAR(m.output_throughput, 128 / run->duration_s, 1e-9);
  if (run->duration_s < 1.0) EXPECT_EQ(m.max_output_tokens_per_s, 128);  // everything inside the first second
  // What the client stamped vs what the server logged: never before the server sent it.
  const std::vector<double> d = Delays(*run, f.server.traces());
  ASSERT_EQ(d.size(), 8u * 16);
  EXPECT_GE(*std::min_element(d.begin(), d.end()), 0);
  std::printf("client stamp - server send: median %.3f ms\n", Percentile(d, 50));
  EXPECT_EQ(run->sse_messages, 8 * (16 + 2));  // tokens, usage, [DONE]
}

TEST(BenchRunnerTest, PackedChunksAreOneItlSampleEach) {
  FakeServerOptions fo;
  fo.ttft_s = 0.02;
  fo.itl_s = 0.02;
  fo.tokens_per_chunk = 4;
  Fixture f(fo);
  auto run = RunBenchmark(Requests(2, 16), f.Options());
  ASSERT_TRUE(run.ok()) << run.message();
  for (const auto& out : run->outcomes) {
    ASSERT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.itl.size(), 3u);       // 4 chunks
    EXPECT_EQ(out.output_tokens, 16);    // from usage, not from the chunks
  }
  const BenchMetrics m = CalculateMetrics(run->outcomes, run->duration_s, {99}, {});
  // TPOT counts tokens, not chunks: (E2EL - TTFT) / (16 - 1), where E2EL - TTFT is the sum of
  // the 3 chunk gaps. Only the configured times are bounds a loaded machine cannot break: the
  // last chunk leaves the server >= 20 + 3 x 20 ms after the request (a late first chunk at the
  // client can shorten E2EL - TTFT below 60 ms, so that is no bound).
  std::vector<double> tpot;
  for (const auto& out : run->outcomes) {
    tpot.push_back((out.latency - out.ttft) / 15 * 1e3);
    double gaps = 0;
    for (double g : out.itl) gaps += g;
    EXPECT_NEAR(gaps, out.latency - out.ttft, 1e-6);
    EXPECT_GE(out.latency, 0.08 - 1e-3);
  }
  EXPECT_NEAR(m.tpot.median_ms, Percentile(tpot, 50), 1e-9);
  EXPECT_GT(m.tpot.median_ms, 0);
  std::printf("packed chunks: median TPOT %.2f ms (configured 4.00), ITL %.1f ms (configured 20)\n", m.tpot.median_ms,
              m.itl.median_ms);
}

TEST(BenchRunnerTest, FailuresAreCountedNotFatal) {
  FakeServerOptions fo;
  fo.ttft_s = 0.01;
  fo.itl_s = 0.005;
  fo.fail_500 = {1};
  fo.drop_mid_stream = {2};
  fo.malformed_sse = {3};
  fo.no_choices = {4};
  Fixture f(fo);
  auto run = RunBenchmark(Requests(8, 6), f.Options());
  ASSERT_TRUE(run.ok()) << run.message();
  const auto& o = run->outcomes;
  EXPECT_NE(o[1].error.find("HTTP 500"), std::string::npos) << o[1].error;
  EXPECT_NE(o[1].error.find("injected failure"), std::string::npos) << o[1].error;
  EXPECT_NE(o[2].error.find("closed the connection"), std::string::npos) << o[2].error;
  EXPECT_NE(o[3].error.find("malformed SSE"), std::string::npos) << o[3].error;
  EXPECT_NE(o[4].error.find("Never received a valid chunk"), std::string::npos) << o[4].error;
  for (int i : {0, 5, 6, 7}) EXPECT_TRUE(o[i].success) << i << ": " << o[i].error;
  const BenchMetrics m = CalculateMetrics(o, run->duration_s, {99}, {});
  EXPECT_EQ(m.completed, 4);
  EXPECT_EQ(m.failed, 4);
  EXPECT_EQ(m.total_output, 4 * 6);
  EXPECT_EQ(m.actual_output_lens, (std::vector<int>{6, 0, 0, 0, 0, 6, 6, 6}));
}

TEST(BenchRunnerTest, ConcurrencyCapQueuesOutsideTtft) {
  FakeServerOptions fo;
  fo.ttft_s = 0.05;
  fo.itl_s = 0.01;
  Fixture f(fo);
  RunOptions o = f.Options();
  o.max_concurrency = 2;
  auto run = RunBenchmark(Requests(6, 6), o);
  ASSERT_TRUE(run.ok()) << run.message();
  const BenchMetrics m = CalculateMetrics(run->outcomes, run->duration_s, {99}, {});
  EXPECT_EQ(m.completed, 6);
  EXPECT_EQ(m.max_concurrent_requests, 2);
  // Three waves of >= 100 ms; the last wave waited >= two of them, and none of it is in TTFT:
  // TTFT counted from arrival would be at least the wait plus the server's 50 ms.
  std::vector<double> q;
  for (const auto& out : run->outcomes) {
    q.push_back(out.queue_time);
    if (out.queue_time > 0.1) EXPECT_LT(out.ttft, out.queue_time + 0.05) << out.queue_time;
  }
  std::sort(q.begin(), q.end());
  EXPECT_GE(q[0], 0);
  EXPECT_GT(q[5], 2 * 0.1 - 0.01);
  EXPECT_GE(run->duration_s, 3 * 0.1 - 0.005);
}

TEST(BenchRunnerTest, ArrivalsFollowTheRate) {
  FakeServerOptions fo;
  fo.ttft_s = 0.001;
  fo.itl_s = 0.001;
  Fixture f(fo);
  RunOptions o = f.Options();
  o.request_rate = 20;
  o.burstiness = kInf;  // constant gaps of 50 ms
  auto run = RunBenchmark(Requests(10, 2), o);
  ASSERT_TRUE(run.ok()) << run.message();
  std::vector<double> starts;
  for (const auto& out : run->outcomes) starts.push_back(out.start_time);
  // Requests go out in order, none held back (no concurrency cap), and the last no sooner than
  // its offset, n / rate = 0.5 s (below). How late each goes depends on the machine's load, so
  // the gaps are printed, not bounded; arrivals_test.cc checks the offsets themselves.
  for (size_t i = 0; i < starts.size(); ++i) {
    EXPECT_GE(run->outcomes[i].queue_time, 0) << i;
    if (i) EXPECT_GE(starts[i], starts[i - 1]) << i;
  }
  std::printf("arrivals at 20 req/s: mean gap %.1f ms (configured 50), duration %.3f s\n",
              (starts.back() - starts.front()) / double(starts.size() - 1) * 1e3, run->duration_s);
  // The last request goes out at n / rate = 0.5 s.
  EXPECT_GE(run->duration_s, 0.5);
}

TEST(BenchRunnerTest, ChatEndpointAndCloseDelimitedStreams) {
  FakeServerOptions fo;
  fo.ttft_s = 0.01;
  fo.itl_s = 0.005;
  fo.chunked = false;
  Fixture f(fo);
  RunOptions o = f.Options();
  o.endpoint = ApiEndpoint::kChatCompletions;
  auto run = RunBenchmark(Requests(3, 4), o);
  ASSERT_TRUE(run.ok()) << run.message();
  for (const auto& out : run->outcomes) {
    ASSERT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.generated_text, "tok tok tok tok ");
    EXPECT_EQ(out.output_tokens, 4);
  }
}

TEST(BenchRunnerTest, ReadyCheckFailureStopsTheRun) {
  FakeServerOptions fo;
  Fixture f(fo);
  RunOptions o = f.Options();
  o.model = "x";
  o.url.port = 1;  // nothing listens on port 1
  o.ready_check_timeout_s = 0.5;
  auto run = RunBenchmark(Requests(2, 2), o);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.message().find("initial test request failed"), std::string::npos) << run.message();
}

TEST(BenchRunnerTest, ThousandConcurrentStreams) {
  FakeServerOptions fo;
  fo.ttft_s = 0.3;
  fo.itl_s = 0.05;
  fo.threads = 1100;
  Fixture f(fo);
  RunOptions o = f.Options();
  o.ready_check_timeout_s = 0;
  auto run = RunBenchmark(Requests(1000, 10), o);
  ASSERT_TRUE(run.ok()) << run.message();
  const BenchMetrics m = CalculateMetrics(run->outcomes, run->duration_s, {50, 99}, {});
  EXPECT_EQ(m.completed, 1000);
  EXPECT_EQ(run->peak_open_connections, 1000);
  EXPECT_EQ(m.max_concurrent_requests, 1000);
  const std::vector<double> d = Delays(*run, f.server.traces());
  EXPECT_EQ(d.size(), 1000u * 10);
  // Timing at 1,000 streams on two cores depends on what else the machine runs (a loaded CI
  // host measured a 50 ms median delay): printed, not asserted. The client's own overhead is
  // measured by `gemmakit bench client-check`, timing accuracy by MeasuresTheConfiguredTiming.
  std::printf("1000 streams: median ITL %.1f ms (server: 50 ms), median arrival delay %.2f ms\n", m.itl.median_ms,
              Percentile(d, 50));
}

}  // namespace
}  // namespace gk::bench

namespace gk::bench {
namespace {

// vLLM's --lora-modules: every timed request names an adapter; round-robin in turn, random
// seeded (the same seed, the same assignment) and touching every adapter over many requests.
TEST(RequestModels, AssignsLoraModules) {
  RunOptions o;
  o.model = "base";
  EXPECT_EQ(RequestModels(3, o), (std::vector<std::string>{"base", "base", "base"}));
  o.lora_modules = {"a", "b", "c"};
  o.lora_round_robin = true;
  EXPECT_EQ(RequestModels(5, o), (std::vector<std::string>{"a", "b", "c", "a", "b"}));
  o.lora_round_robin = false;
  o.seed = 7;
  const std::vector<std::string> r = RequestModels(300, o);
  EXPECT_EQ(r, RequestModels(300, o));
  for (const char* name : {"a", "b", "c"}) {
    const auto n = std::count(r.begin(), r.end(), name);
    EXPECT_GT(n, 60) << name;
  }
  o.seed = 8;
  EXPECT_NE(r, RequestModels(300, o));
}

}  // namespace
}  // namespace gk::bench
