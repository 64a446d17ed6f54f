// One streamed OpenAI-compatible request as vLLM's request functions send and time it
// (vllm/benchmarks/lib/endpoint_request_func.py; shared/spec/serving.md §1.1):
//  - body: model, prompt (or messages for chat), max_tokens (max_completion_tokens for chat),
//    stream: true, stream_options.include_usage, ignore_eos when set, the sampling flags and
//    --extra-body merged in; header x-request-id;
//  - TTFT at the first SSE message whose "choices" is non-empty (even with empty text), one ITL
//    sample per later such message, E2EL at the last of them (usage-only chunks and [DONE]
//    don't count);
//  - output tokens from usage.completion_tokens, prompt length from usage.prompt_tokens;
//  - success: HTTP 200 and at least one chunk with choices.
// Where we are stricter than vLLM: a stream that ends without [DONE], or with data that is not
// JSON, fails the request with that reason instead of raising or passing silently.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench_serve/http_client.h"
#include "tools/bench_serve/request_outcome.h"
#include "tools/bench_serve/sse_parser.h"

namespace gk::bench {

enum class ApiEndpoint { kCompletions, kChatCompletions };
// "/v1/completions" or "/v1/chat/completions"; anything else is an error.
Result<ApiEndpoint> ParseEndpoint(const std::string& path);
const char* EndpointPath(ApiEndpoint endpoint);

struct SamplingFlags {
  std::optional<double> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<int> logprobs;
  nlohmann::json extra_body = nlohmann::json::object();  // merged last (wins)
};

struct StreamRequestSpec {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;
  std::string prompt;
  int max_tokens = 0;
  bool ignore_eos = false;
  std::string request_id;  // "" sends no x-request-id
  std::string api_key;     // "" sends no Authorization
  std::vector<std::pair<std::string, std::string>> headers;
};

HttpRequest BuildStreamRequest(const StreamRequestSpec& spec, const SamplingFlags& sampling);

// Fills a RequestOutcome from the response; done() after OnDone.
class OpenAiStreamHandler : public HttpResponseHandler {
 public:
  OpenAiStreamHandler(ApiEndpoint endpoint, int dataset_prompt_len);
  void SetStart(double start_time) { outcome_.start_time = start_time; }
  // Called at the end of OnDone (the runner frees the request's concurrency slot).
  void SetOnDone(std::function<void()> f) { on_done_ = std::move(f); }
  void OnStatus(int status, const std::string& reason, double now) override;
  void OnBody(std::string_view bytes, double now) override;
  void OnDone(const std::string& error, double now) override;

  bool done() const { return done_; }
  RequestOutcome& outcome() { return outcome_; }
  long long chunks() const { return chunks_; }  // SSE messages received

 private:
  void OnData(std::string_view data, double now);
  void Fail(std::string error);

  ApiEndpoint endpoint_;
  RequestOutcome outcome_;
  SseParser sse_;
  int status_ = 0;
  std::string status_reason_, error_body_;
  bool first_chunk_ = false, saw_done_ = false, done_ = false;
  double last_chunk_time_ = 0;
  long long chunks_ = 0;
  std::function<void()> on_done_;
};

}  // namespace gk::bench
