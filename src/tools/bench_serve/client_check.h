// `gemmakit bench client-check`: is the benchmark client itself the bottleneck? Runs the
// client against an in-process FakeSseServer that streams at a fixed rate, with many streams
// at once, and compares every chunk's arrival time at the client with the time the server
// logged writing it (one steady clock in one process): the gap is what the client adds to
// TTFT and ITL. Also reports the client's CPU time per SSE message.
#pragma once

#include "tools/bench_serve/bench_runner.h"
#include "tools/bench_serve/metrics.h"

namespace gk::bench {

struct ClientCheckOptions {
  int streams = 1000;      // requests, all sent at once and streaming together
  double ttft_s = 0.5;     // the fake server's delay before the first chunk
  double itl_s = 0.05;     // and between chunks
  int tokens = 32;         // per request
  bool chat = false;
};

struct ClientCheckResult {
  RunResult run;
  BenchMetrics metrics;
  // arrival at the client - write at the server, over every chunk of every request (ms)
  double delay_median_ms = 0, delay_p99_ms = 0, delay_max_ms = 0;
  // server received the request - client started it (connect, send, the server's accept) (ms)
  double setup_median_ms = 0, setup_p99_ms = 0;
  long long chunks_matched = 0;
  int peak_server_streams = 0;
};

Result<ClientCheckResult> RunClientCheck(const ClientCheckOptions& options);

}  // namespace gk::bench
