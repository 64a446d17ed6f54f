// Parsing and validation of the JSON bodies of the OpenAI-compatible endpoints
// (POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize), following vLLM's
// request models (../shared/spec/serving.md §2.9).
//
// Everything that can be checked without the tokenizer and the model is checked here: malformed
// JSON, invalid UTF-8, wrong types of known fields, out-of-range values. Unknown fields are
// ignored (reported in `ignored_fields` so the server can log a warning, as vLLM does); known
// fields whose non-default values we cannot honour (penalties, logit_bias, tool_choice
// "required", ...) are a 400 rather than silently wrong output. Chat messages and tools keep
// their key order (the template prints a schema's properties in the client's order). Checks that need the prompt length (max_model_len) are in
// CheckContextLength, run after tokenization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/chat_renderer.h"
#include "server/api_error.h"

namespace gk::server {

enum class ApiKind { kCompletion, kChat };

// Limits of this server (vLLM's max_logprobs default is 20).
inline constexpr int kMaxLogprobs = 20;
inline constexpr int kMaxN = 128;
inline constexpr int kMaxChoices = 1024;  // prompts x n

// One completion prompt: text, or token ids given by the client.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct OpenAIRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;                    // "" when absent (the first served name)
  std::vector<PromptInput> prompts;     // completions: one or more prompts
  ChatRenderInput chat;                 // chat: messages, tools, add_generation_prompt, chat_template_kwargs
  bool parse_tool_calls = false;        // chat: tools given and tool_choice "auto" (the default with tools)
  bool include_reasoning = true;        // chat: report the reasoning (vLLM's include_reasoning)
  std::optional<int64_t> max_tokens;    // max_tokens (or max_completion_tokens for chat); unset: default
  double temperature = 1.0;             // OpenAI's default; 0 = greedy
  double top_p = 1.0;
  int top_k = 0;                        // 0 (or -1 in the request) = off
  int64_t min_tokens = 0;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;        // stop strings (non-empty)
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  int n = 1;
  bool ignore_eos = false;
  int logprobs = -1;                    // -1: none; else top-k alternatives (chat: top_logprobs)
  bool echo = false;                    // completions
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats
  bool add_special_tokens = true;       // completions: true (BOS), chat: false
  bool skip_special_tokens = true;
  std::optional<int64_t> truncate_prompt_tokens;  // keep only the last k prompt tokens
  std::string cache_salt;
  std::vector<std::string> ignored_fields;  // unknown fields, ignored
};

// Parses a /v1/completions (kCompletion) or /v1/chat/completions (kChat) body.
std::optional<ApiError> ParseOpenAIRequest(std::string_view body, ApiKind kind, OpenAIRequest* out);

// POST /tokenize: {model?, prompt, add_special_tokens=true} or
// {model?, messages, tools?, add_special_tokens=false, add_generation_prompt=true, chat_template_kwargs?}.
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  ChatRenderInput chat;  // messages, tools, add_generation_prompt, chat_template_kwargs
  bool add_special_tokens = true;
};
std::optional<ApiError> ParseTokenizeRequest(std::string_view body, TokenizeRequest* out);

// POST /detokenize: {model?, tokens: [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, DetokenizeRequest* out);

// After tokenization: the prompt plus the requested completion must fit max_model_len (vLLM's
// wording). Sets *max_tokens to the completion budget: the request's, else 16 for completions
// and what is left of max_model_len for chat.
std::optional<ApiError> CheckContextLength(const OpenAIRequest& request, int64_t prompt_tokens,
                                           int64_t max_model_len, int64_t* max_tokens);

// Whether `text` is well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

}  // namespace gk::server
