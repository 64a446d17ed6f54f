// Runs one benchmark point: requests sent on an open-loop schedule (arrivals.h), at most
// max_concurrency in flight (the rest wait client-side, and that wait is kept out of TTFT and
// E2EL and reported as queue_time), all on one event loop (http_client.h).
//
// Before the timed run, as vLLM: a ready check sends request 0 and fails the benchmark if it
// fails (retrying while the server refuses connections, up to ready_check_timeout_s), then
// num_warmups copies of it. None of these are counted.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/bench_serve/datasets.h"
#include "tools/bench_serve/openai_stream.h"
#include "tools/bench_serve/request_outcome.h"

namespace gk::bench {

struct RunOptions {
  BaseUrl url;
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;
  // vLLM's --lora-modules: each timed request names one of these adapters as its "model"
  // (the ready check and warm-ups use `model`), at random (seeded) or in turn.
  std::vector<std::string> lora_modules;
  bool lora_round_robin = false;
  double request_rate = 1.0 / 0.0;  // requests/s; inf sends all at t = 0
  double burstiness = 1.0;
  int max_concurrency = 0;          // 0: no limit
  bool ignore_eos = false;
  SamplingFlags sampling;
  std::string api_key;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string request_id_prefix;    // x-request-id = prefix + index
  uint64_t seed = 0;
  double ready_check_timeout_s = 600;  // 0 skips the ready check
  int num_warmups = 0;
  double request_timeout_s = 6 * 3600;  // aiohttp's total timeout in vLLM
  // Called at most ~10 times a second and once at the end: (finished, total).
  std::function<void(int, int)> progress;
};

struct RunResult {
  std::vector<RequestOutcome> outcomes;  // in dataset order
  double duration_s = 0;                 // first dispatch until the last request finished
  double client_cpu_s = 0;               // CPU time of the event loop thread during the run
  long long sse_messages = 0;            // SSE messages read during the run
  int peak_open_connections = 0;
};

// The model name of each timed request: `model`, or its LoRA module (see RunOptions).
std::vector<std::string> RequestModels(int n, const RunOptions& options);

Result<RunResult> RunBenchmark(const std::vector<SampleRequest>& requests, const RunOptions& options);

}  // namespace gk::bench
