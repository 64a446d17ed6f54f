#include "tools/bench_serve/bench_runner.h"

#include <ctime>
#include <deque>
#include <memory>
#include <random>
#include <thread>

#include "tools/bench_serve/arrivals.h"
#include "util/clock.h"
#include "util/open_file_limit.h"

namespace gk::bench {

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

StreamRequestSpec SpecFor(const SampleRequest& r, const RunOptions& o, const std::string& request_id,
                          const std::string& model) {
  StreamRequestSpec s;
  s.endpoint = o.endpoint;
  s.model = model;
  s.prompt = r.prompt;
  s.max_tokens = r.expected_output_len;
  s.ignore_eos = o.ignore_eos;
  s.request_id = request_id;
  s.api_key = o.api_key;
  s.headers = o.headers;
  return s;
}

// Sends one request and waits for it (ready check, warm-ups).
RequestOutcome RunOne(HttpClient& client, const SampleRequest& r, const RunOptions& o) {
  OpenAiStreamHandler h(o.endpoint, r.prompt_len);
  h.SetStart(client.Start(BuildStreamRequest(SpecFor(r, o, "", o.model), o.sampling), &h));
  while (!h.done()) client.Poll(0.05);
  return std::move(h.outcome());
}

Status ReadyCheck(HttpClient& client, const SampleRequest& r, const RunOptions& o) {
  const double deadline = NowSeconds() + o.ready_check_timeout_s;
  for (;;) {
    RequestOutcome out = RunOne(client, r, o);
    if (out.success) return Status::Ok();
    const bool not_up = out.error.starts_with("cannot connect");
    if (!not_up || NowSeconds() > deadline) {
      return Status::Error(StrCat("the initial test request failed (check --base-url, --model, --endpoint): ",
                                  out.error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

std::vector<std::string> RequestModels(int n, const RunOptions& o) {
  if (o.lora_modules.empty()) return std::vector<std::string>(size_t(n), o.model);
  std::vector<std::string> out;
  std::mt19937_64 rng(o.seed ^ 0x4c6f5241ull);  // "LoRA": apart from the arrivals' stream
  for (int i = 0; i < n; ++i) {
    const size_t k = o.lora_round_robin ? size_t(i) % o.lora_modules.size() : size_t(rng() % o.lora_modules.size());
    out.push_back(o.lora_modules[k]);
  }
  return out;
}

Result<RunResult> RunBenchmark(const std::vector<SampleRequest>& requests, const RunOptions& o) {
  if (requests.empty()) return Result<RunResult>::Error("no requests to send");
  RaiseOpenFileLimit();  // one descriptor per concurrent stream
  GK_ASSIGN_OR_RETURN(std::unique_ptr<HttpClient> client, HttpClient::Create(o.url, o.request_timeout_s));
  if (o.ready_check_timeout_s > 0) GK_RETURN_IF_ERROR(ReadyCheck(*client, requests[0], o));
  for (int i = 0; i < o.num_warmups; ++i) RunOne(*client, requests[0], o);  // counted nowhere

  const int n = static_cast<int>(requests.size());
  const std::vector<double> offsets = ArrivalOffsets(n, o.request_rate, o.burstiness, o.seed);
  const std::vector<std::string> models = RequestModels(n, o);
  std::vector<std::unique_ptr<OpenAiStreamHandler>> handlers(n);
  std::vector<double> arrival(n, 0);
  std::deque<int> waiting;  // arrived, held back by max_concurrency
  std::vector<int> finished_now;
  int next = 0, finished = 0, in_flight = 0;
  RunResult result;

  auto dispatch = [&](int i) {
    ++in_flight;
    const SampleRequest& r = requests[i];
    handlers[i] = std::make_unique<OpenAiStreamHandler>(o.endpoint, r.prompt_len);
    // OnDone may run inside Start (connection refused) or Poll; either way it lands here.
    handlers[i]->SetOnDone([&finished_now, i] { finished_now.push_back(i); });
    HttpRequest req = BuildStreamRequest(SpecFor(r, o, StrCat(o.request_id_prefix, i), models[size_t(i)]), o.sampling);
    handlers[i]->SetStart(client->Start(req, handlers[i].get()));
  };

  const double cpu0 = ThreadCpuSeconds();
  const double start = NowSeconds();
  double last_progress = 0;
  while (finished < n) {
    const double now = NowSeconds();
    while (next < n && start + offsets[next] <= now) {
      arrival[next] = now;  // vLLM stamps the arrival when its generator yields the request
      if (o.max_concurrency > 0 && in_flight >= o.max_concurrency) waiting.push_back(next);
      else dispatch(next);
      ++next;
    }
    const double wait = next < n ? std::min(0.05, start + offsets[next] - NowSeconds()) : 0.05;
    client->Poll(wait);
    result.peak_open_connections = std::max(result.peak_open_connections, client->open_connections());
    finished += static_cast<int>(finished_now.size());
    in_flight -= static_cast<int>(finished_now.size());
    finished_now.clear();
    while (!waiting.empty() && (o.max_concurrency == 0 || in_flight < o.max_concurrency)) {
      dispatch(waiting.front());
      waiting.pop_front();
    }
    if (o.progress && NowSeconds() - last_progress > 0.1) {
      last_progress = NowSeconds();
      o.progress(finished, n);
    }
  }
  result.duration_s = NowSeconds() - start;
  result.client_cpu_s = ThreadCpuSeconds() - cpu0;
  if (o.progress) o.progress(n, n);
  result.outcomes.reserve(n);
  for (int i = 0; i < n; ++i) {
    result.sse_messages += handlers[i]->chunks();
    RequestOutcome out = std::move(handlers[i]->outcome());
    out.queue_time = out.start_time - arrival[i];
    result.outcomes.push_back(std::move(out));
  }
  return result;
}

}  // namespace gk::bench
