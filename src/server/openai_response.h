// JSON bodies of the OpenAI-compatible responses and their SSE chunks (vLLM's shapes,
// ../shared/spec/serving.md §2.9):
//   completion        {id: "cmpl-…", object: "text_completion", created, model, choices, usage}
//   chat completion   {id: "chatcmpl-…", object: "chat.completion", created, model, choices, usage};
//                     message {role, content, reasoning_content, tool_calls: [{id, type, function:
//                     {name, arguments}}]}, content null when the model only called tools
//   chunks            object "text_completion" / "chat.completion.chunk"; "usage": null on every
//                     chunk when include_usage, then one chunk with choices [] and the usage
//   SSE               "data: <json>\n\n" per event, "data: [DONE]\n\n" at the end
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gemma4_output.h"

namespace gk::server {

using json = nlohmann::ordered_json;  // keys in insertion order, as vLLM writes them

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  Usage& operator+=(const Usage& o);
  json ToJson() const;  // {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}}
};

// A generated token's log-probability with its text (the server decodes the ids).
struct LogprobEntry {
  std::string token;
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;  // best first
  int64_t text_offset = 0;                          // byte offset in the choice's text (legacy format)
};
// Completions (legacy): {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
json CompletionLogprobs(const std::vector<LogprobEntry>& entries);
// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json ChatLogprobs(const std::vector<LogprobEntry>& entries);

// One choice of a full response or a chunk. finish_reason "" -> null.
struct ChoiceOut {
  int index = 0;
  std::string text;
  json logprobs;                  // null when not requested
  std::string finish_reason;      // "", "stop", "length", "abort", "tool_calls"
  json stop_reason;               // null, the stop string, or the stop token id
  bool role = false;              // chat chunks: carry role "assistant" in the delta
  std::string reasoning;          // chat: reasoning_content ("" -> null / absent from a delta)
  std::vector<Gemma4ToolCall> tool_calls;
  int tool_call_index = 0;        // chunks: the index of tool_calls[0] within the choice
};

// "cmpl-" / "chatcmpl-" followed by 32 random hex digits.
std::string NewRequestId(const char* prefix);

json CompletionResponse(const std::string& id, int64_t created, const std::string& model,
                        const std::vector<ChoiceOut>& choices, const Usage& usage);
json ChatResponse(const std::string& id, int64_t created, const std::string& model,
                  const std::vector<ChoiceOut>& choices, const Usage& usage);
// usage: nullopt -> no "usage" key; json(nullptr) -> "usage": null; an object -> that usage.
json CompletionChunk(const std::string& id, int64_t created, const std::string& model, const ChoiceOut& choice,
                     const std::optional<json>& usage);
json ChatChunk(const std::string& id, int64_t created, const std::string& model, const ChoiceOut& choice,
               const std::optional<json>& usage);
// The final usage chunk: choices [].
json UsageChunk(bool chat, const std::string& id, int64_t created, const std::string& model, const Usage& usage);

// Serialises without throwing on invalid UTF-8 (replaced by U+FFFD).
std::string DumpJson(const json& j);
std::string SseEvent(const json& j);  // "data: <json>\n\n"
inline constexpr const char kSseDone[] = "data: [DONE]\n\n";

// GET /v1/models.
struct ModelCard {
  std::string id;
  std::string root;    // the model directory (the adapter directory for a LoRA)
  std::string parent;  // "" -> null (the base model for a LoRA)
  int64_t created = 0;
  int64_t max_model_len = 0;
};
json ModelList(const std::vector<ModelCard>& models);

}  // namespace gk::server
