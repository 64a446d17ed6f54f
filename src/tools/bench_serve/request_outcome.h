// What the benchmark client measured for one request, in the units and with the meaning of
// vLLM's RequestFuncOutput (vllm/benchmarks/lib/endpoint_request_func.py). Times are seconds on
// the client's steady clock; start_time is absolute on that clock.
#pragma once

#include <string>
#include <vector>

namespace gk::bench {

struct RequestOutcome {
  bool success = false;
  std::string error;           // why it failed ("" on success)
  int prompt_len = 0;          // usage.prompt_tokens when the server sent it, else the dataset's
  int output_tokens = 0;       // usage.completion_tokens; 0 when unknown (see metrics.h)
  double ttft = 0;             // first chunk with non-empty choices - start_time
  std::vector<double> itl;     // one gap per later chunk with choices
  double latency = 0;          // last token-bearing chunk - start_time (E2EL)
  double start_time = 0;       // just before the request was written (after the concurrency gate)
  double queue_time = 0;       // start_time - scheduled arrival (client-side queueing)
  std::string generated_text;  // concatenated text/content deltas
};

}  // namespace gk::bench
