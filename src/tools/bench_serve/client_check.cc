#include "tools/bench_serve/client_check.h"

#include <algorithm>
#include <cmath>

#include "tools/bench_serve/fake_sse_server.h"

namespace gk::bench {

Result<ClientCheckResult> RunClientCheck(const ClientCheckOptions& o) {
  if (o.streams < 1 || o.tokens < 1) return Result<ClientCheckResult>::Error("--streams and --tokens must be >= 1");
  FakeServerOptions fo;
  fo.ttft_s = o.ttft_s;
  fo.itl_s = o.itl_s;
  fo.threads = o.streams + 16;
  FakeSseServer server(fo);
  GK_ASSIGN_OR_RETURN(int port, server.Start());

  std::vector<SampleRequest> requests(o.streams);
  for (auto& r : requests) {
    r.prompt = "check";
    r.prompt_len = 1;
    r.expected_output_len = o.tokens;
  }
  RunOptions ro;
  ro.url = {"127.0.0.1", port, "", StrCat("http://127.0.0.1:", port)};
  ro.endpoint = o.chat ? ApiEndpoint::kChatCompletions : ApiEndpoint::kCompletions;
  ro.model = fo.model;
  ro.request_id_prefix = "check-";
  ro.ready_check_timeout_s = 0;
  GK_ASSIGN_OR_RETURN(RunResult run, RunBenchmark(requests, ro));
  server.Stop();

  ClientCheckResult r;
  r.metrics = CalculateMetrics(run.outcomes, run.duration_s, {50, 99}, {});
  std::vector<const FakeRequestTrace*> by_index(o.streams, nullptr);
  const std::vector<FakeRequestTrace> traces = server.traces();
  for (const auto& t : traces) {
    if (t.index >= 0 && t.index < o.streams) by_index[t.index] = &t;
  }
  std::vector<double> delays, setups;
  for (int i = 0; i < o.streams; ++i) {
    const RequestOutcome& out = run.outcomes[i];
    const FakeRequestTrace* t = by_index[i];
    if (!out.success || !t || t->sends.size() != out.itl.size() + 1) continue;
    setups.push_back(t->received - out.start_time);
    double arrival = out.start_time + out.ttft;
    for (size_t k = 0; k < t->sends.size(); ++k) {
      if (k > 0) arrival += out.itl[k - 1];
      delays.push_back(arrival - t->sends[k]);
    }
  }
  // Concurrency at the server: how many streams were open at the busiest moment.
  std::vector<std::pair<double, int>> events;
  for (const auto& t : traces) {
    if (t.sends.empty()) continue;
    events.push_back({t.received, 1});
    events.push_back({t.sends.back(), -1});
  }
  std::sort(events.begin(), events.end());
  int open = 0;
  for (const auto& e : events) r.peak_server_streams = std::max(r.peak_server_streams, open += e.second);
  r.chunks_matched = static_cast<long long>(delays.size());
  r.setup_median_ms = Percentile(setups, 50) * 1e3;
  r.setup_p99_ms = Percentile(setups, 99) * 1e3;
  r.delay_median_ms = Percentile(delays, 50) * 1e3;
  r.delay_p99_ms = Percentile(delays, 99) * 1e3;
  r.delay_max_ms = delays.empty() ? 0 : *std::max_element(delays.begin(), delays.end()) * 1e3;
  r.run = std::move(run);
  return r;
}

}  // namespace gk::bench
