// One OpenAI completion or chat request against the ServeEngine, independent of the HTTP
// library: builds the prompts, submits one engine request per choice (prompts x n), collects
// the engine's outputs (delivered on the engine thread through a per-request queue: mutex +
// condition variable, so the callback never blocks), turns tokens into text (TextStream: whole
// UTF-8 characters, stop strings), and produces either the full response or the SSE stream.
//
// Streaming sends nothing before the first token exists: the chat role rides on the first
// content delta, so a client's time to first token is real. A client that goes away (the
// `gone` probe, or a failed write) gets every unfinished engine request aborted at once, which
// frees its KV blocks. Latency histograms and finished-request counts go to ServerMetrics.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engines/serve/engine.h"
#include "formats/gemma4_output.h"
#include "formats/tokenizer.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/prompt_builder.h"
#include "server/server_metrics.h"
#include "server/text_stream.h"

namespace gk::server {

// What every request handler needs; fixed once the server starts.
struct ServeContext {
  ServeEngine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ModelConfig* config = nullptr;
  std::vector<int32_t> eos_ids;   // stop ids unless ignore_eos (StopIds)
  int64_t max_model_len = 0;
  ServerMetrics* metrics = nullptr;
  const ChatFormat* chat_format = nullptr;  // null: the built-in template of config->arch
  // --default-chat-template-kwargs: under every chat request's own (which win, key by key).
  nlohmann::ordered_json default_chat_template_kwargs = nlohmann::ordered_json::object();
  // Chat output split as vLLM's gemma4 parsers split it (formats/gemma4_output.h): the thought
  // channel becomes reasoning_content; <|tool_call> blocks become tool_calls when the request
  // gave tools and tool_choice is not "none".
  bool reasoning_parser = false;
  bool tool_call_parser = false;
};

class RequestSession {
 public:
  using Clock = std::chrono::steady_clock;
  using Gone = std::function<bool()>;

  // lora: the adapter every choice runs through (id 0: the base model).
  RequestSession(const ServeContext& ctx, OpenAIRequest request, std::string model_name,
                 Clock::time_point arrival, EngineLora lora = {});
  ~RequestSession();  // aborts whatever is still running
  RequestSession(const RequestSession&) = delete;
  RequestSession& operator=(const RequestSession&) = delete;

  // Tokenizes, checks lengths and submits every choice. On error nothing is left running.
  std::optional<ApiError> Start();

  // Non-streaming: waits for every choice. `gone` is polled while waiting.
  struct Outcome {
    std::optional<ApiError> error;
    json body;
    bool client_gone = false;
  };
  Outcome Complete(const Gone& gone);

  // Streaming: writes SSE events through `write` (false: the client is gone). Returns false
  // when the client went away (everything was aborted).
  bool Stream(const std::function<bool(const std::string&)>& write, const Gone& gone);

  // Aborts the unfinished choices (client gone); counted as finished_reason "abort".
  void AbortAll();

  const OpenAIRequest& request() const { return request_; }

 private:
  struct Event {
    int choice = 0;
    RequestOutput out;
    Clock::time_point at;
  };
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Event> events;
  };
  struct Choice {
    int index = 0;
    int prompt = 0;
    uint64_t id = 0;
    bool submitted = false;
    bool done = false;  // finished as the client sees it
    std::unique_ptr<TextStream> text;
    std::unique_ptr<Gemma4OutputStream> parser;  // chat with a parser on (decoded text keeps its markers)
    std::string all_text;                 // non-streaming: the whole text (the content when parsed)
    std::string all_reasoning;
    std::vector<Gemma4ToolCall> all_tool_calls;
    int tool_calls_seen = 0;
    std::vector<LogprobEntry> all_logprobs;
    std::string finish;
    json stop_reason;
    int64_t cached_tokens = 0;
    int64_t completion_tokens = 0;
    bool got_first = false;
    Clock::time_point first_at, last_at;
    bool started_stream = false;          // streaming: first chunk (role, echo) sent
  };
  struct Delta {
    bool any = false;  // text, reasoning, tool calls, logprobs or a finish to report
    std::string text;
    std::string reasoning;
    std::vector<Gemma4ToolCall> tool_calls;
    std::vector<LogprobEntry> logprobs;
    bool finished = false;
  };

  Delta Apply(Choice& c, const RequestOutput& out, Clock::time_point at);
  // Decoded text into the delta: as it is, or split by the choice's parser.
  void Route(Choice& c, const std::string& text, bool final, Delta* d) const;
  void Finish(Choice& c, const std::string& reason, Clock::time_point at);
  // Waits up to `timeout` for events and moves them to *out.
  void Take(std::deque<Event>* out, std::chrono::milliseconds timeout);
  bool AllDone() const;
  void AbortUnfinished(bool count);
  Usage TotalUsage() const;
  json ChoiceLogprobs(const std::vector<LogprobEntry>& entries) const;
  ChoiceOut MakeOut(const Choice& c, std::string text, const std::vector<LogprobEntry>* logprobs) const;
  bool EngineDead();

  ServeContext ctx_;
  OpenAIRequest request_;
  std::string model_name_;
  EngineLora lora_;
  Clock::time_point arrival_;
  std::string id_;
  int64_t created_ = 0;
  std::vector<PreparedPrompt> prompts_;
  std::vector<Choice> choices_;
  std::shared_ptr<Channel> channel_;
  int dead_polls_ = 0;
};

}  // namespace gk::server
