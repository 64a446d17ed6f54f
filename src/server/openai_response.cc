#include "server/openai_response.h"

#include <cmath>
#include <random>

namespace gk::server {

namespace {

// vLLM clamps -inf log-probabilities to -9999.0 so the JSON stays valid.
double ClampLogprob(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

json Base(const std::string& id, const char* object, int64_t created, const std::string& model) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

json FinishReason(const ChoiceOut& c) { return c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason); }

// One choice of a completion, whole or streamed (the same object in both).
json CompletionChoice(const ChoiceOut& c) {
  return {{"index", c.index},
          {"text", c.text},
          {"logprobs", c.logprobs},
          {"finish_reason", FinishReason(c)},
          {"stop_reason", c.stop_reason}};
}

// [{id, type: "function", function: {name, arguments}}]; chunks add each call's "index".
json ToolCalls(const std::vector<Gemma4ToolCall>& calls, int first_index, bool with_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = json::object();
    if (with_index) call["index"] = first_index + int(i);
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

json ChatChoice(const ChoiceOut& c) {
  const json content = c.text.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.text);
  const json reasoning = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
  return {{"index", c.index},
          {"message", {{"role", "assistant"}, {"content", content}, {"reasoning_content", reasoning},
                       {"tool_calls", ToolCalls(c.tool_calls, 0, false)}}},
          {"logprobs", c.logprobs},
          {"finish_reason", FinishReason(c)},
          {"stop_reason", c.stop_reason}};
}

// A whole (non-streamed) response: every choice through `choice`, then the usage.
json Response(const std::string& id, const char* object, int64_t created, const std::string& model,
              const std::vector<ChoiceOut>& choices, const Usage& usage, json (*choice)(const ChoiceOut&)) {
  json j = Base(id, object, created, model);
  json cs = json::array();
  for (const ChoiceOut& c : choices) cs.push_back(choice(c));
  j["choices"] = std::move(cs);
  j["usage"] = usage.ToJson();
  return j;
}

}  // namespace

Usage& Usage::operator+=(const Usage& o) {
  prompt_tokens += o.prompt_tokens;
  completion_tokens += o.completion_tokens;
  cached_tokens += o.cached_tokens;
  return *this;
}

json Usage::ToJson() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json CompletionLogprobs(const std::vector<LogprobEntry>& entries) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.token);
    lps.push_back(ClampLogprob(e.logprob));
    json top = json::object();
    for (const auto& [t, lp] : e.top) {
      if (!top.contains(t)) top[t] = ClampLogprob(lp);
    }
    tops.push_back(std::move(top));
    offsets.push_back(e.text_offset);
  }
  return {{"text_offset", offsets}, {"token_logprobs", lps}, {"tokens", tokens}, {"top_logprobs", tops}};
}

json ChatLogprobs(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json top = json::array();
    for (const auto& [t, lp] : e.top) top.push_back({{"token", t}, {"logprob", ClampLogprob(lp)}, {"bytes", Bytes(t)}});
    content.push_back(
        {{"token", e.token}, {"logprob", ClampLogprob(e.logprob)}, {"bytes", Bytes(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

std::string NewRequestId(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 2; ++i) {
    uint64_t v = rng();
    for (int k = 0; k < 16; ++k, v >>= 4) id += kHex[v & 15];
  }
  return id;
}

json CompletionResponse(const std::string& id, int64_t created, const std::string& model,
                        const std::vector<ChoiceOut>& choices, const Usage& usage) {
  return Response(id, "text_completion", created, model, choices, usage, &CompletionChoice);
}

json ChatResponse(const std::string& id, int64_t created, const std::string& model,
                  const std::vector<ChoiceOut>& choices, const Usage& usage) {
  return Response(id, "chat.completion", created, model, choices, usage, &ChatChoice);
}

json CompletionChunk(const std::string& id, int64_t created, const std::string& model, const ChoiceOut& c,
                     const std::optional<json>& usage) {
  json j = Base(id, "text_completion", created, model);
  j["choices"] = json::array({CompletionChoice(c)});
  if (usage) j["usage"] = *usage;
  return j;
}

json ChatChunk(const std::string& id, int64_t created, const std::string& model, const ChoiceOut& c,
               const std::optional<json>& usage) {
  json j = Base(id, "chat.completion.chunk", created, model);
  json delta = json::object();
  if (c.role) delta["role"] = "assistant";
  if (!c.reasoning.empty()) delta["reasoning_content"] = c.reasoning;
  if (!c.text.empty() || (c.role && c.reasoning.empty() && c.tool_calls.empty())) delta["content"] = c.text;
  if (!c.tool_calls.empty()) delta["tool_calls"] = ToolCalls(c.tool_calls, c.tool_call_index, true);
  json choice = {{"index", c.index}, {"delta", std::move(delta)}, {"logprobs", c.logprobs},
                 {"finish_reason", FinishReason(c)}};
  if (!c.finish_reason.empty()) choice["stop_reason"] = c.stop_reason;
  j["choices"] = json::array({std::move(choice)});
  if (usage) j["usage"] = *usage;
  return j;
}

json UsageChunk(bool chat, const std::string& id, int64_t created, const std::string& model, const Usage& usage) {
  json j = Base(id, chat ? "chat.completion.chunk" : "text_completion", created, model);
  j["choices"] = json::array();
  j["usage"] = usage.ToJson();
  return j;
}

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseEvent(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

json ModelList(const std::vector<ModelCard>& models) {
  json data = json::array();
  for (const ModelCard& m : models) {
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "gemmakit"},
                    {"root", m.root},
                    {"parent", m.parent.empty() ? json(nullptr) : json(m.parent)},
                    {"max_model_len", m.max_model_len},
                    {"permission", json::array()}});
  }
  return {{"object", "list"}, {"data", data}};
}

}  // namespace gk::server
