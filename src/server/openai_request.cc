#include "server/openai_request.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "util/guarded_parse.h"
#include "util/result.h"

namespace gk::server {
namespace {

using json = nlohmann::ordered_json;  // messages and tool schemas keep the client's key order
using Err = std::optional<ApiError>;

std::string TypeName(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();  // "null", "boolean", "string", "array", "object"
}

ApiError WrongType(const std::string& name, const char* expected, const json& v) {
  return ApiError::BadRequest(StrCat("'", name, "' must be ", expected, ", got ", TypeName(v)), name);
}

Err ReadInt(const json& v, const std::string& name, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      *out = std::numeric_limits<int64_t>::max();
    } else {
      *out = v.get<int64_t>();
    }
    return std::nullopt;
  }
  if (v.is_number_float()) {  // 16.0 is accepted, as pydantic does
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) {
      *out = d >= 9.2e18 ? std::numeric_limits<int64_t>::max()
                         : d <= -9.2e18 ? std::numeric_limits<int64_t>::min() : int64_t(d);
      return std::nullopt;
    }
  }
  return WrongType(name, "an integer", v);
}

Err ReadNumber(const json& v, const std::string& name, double* out) {
  if (!v.is_number()) return WrongType(name, "a number", v);
  *out = v.get<double>();
  return std::nullopt;
}

Err ReadBool(const json& v, const std::string& name, bool* out) {
  if (!v.is_boolean()) return WrongType(name, "a boolean", v);
  *out = v.get<bool>();
  return std::nullopt;
}

Err ReadString(const json& v, const std::string& name, std::string* out) {
  if (!v.is_string()) return WrongType(name, "a string", v);
  *out = v.get<std::string>();
  return std::nullopt;
}

Err ReadTokenId(const json& v, const std::string& name, int32_t* out) {
  int64_t x = 0;
  if (!v.is_number_integer()) return WrongType(name, "a list of token ids (integers)", v);
  if (auto e = ReadInt(v, name, &x)) return e;
  if (x < 0 || x > std::numeric_limits<int32_t>::max()) {
    return ApiError::BadRequest(StrCat("'", name, "' contains ", x, ", which is not a token id"), name);
  }
  *out = int32_t(x);
  return std::nullopt;
}

Err ReadTokenList(const json& v, const std::string& name, std::vector<int32_t>* out) {
  if (!v.is_array()) return WrongType(name, "a list of token ids", v);
  out->clear();
  for (const json& x : v) {
    int32_t id = 0;
    if (auto e = ReadTokenId(x, name, &id)) return e;
    out->push_back(id);
  }
  return std::nullopt;
}

Err ParseBody(std::string_view body, json* out) {
  if (!IsValidUtf8(body)) return ApiError::BadRequest("The request body is not valid UTF-8.");
  auto parsed = ParseOrderedJson(body, "");  // "not valid JSON: ..."
  if (!parsed.ok()) return ApiError::BadRequest(StrCat("The request body is ", parsed.message()));
  *out = std::move(parsed).value();
  if (!out->is_object()) return ApiError::BadRequest(StrCat("The request body must be a JSON object, got ", TypeName(*out)));
  return std::nullopt;
}

ApiError Unsupported(const std::string& name, const std::string& what = "") {
  return ApiError::BadRequest(
      StrCat("'", name, "' ", what.empty() ? "is not supported by gemmakit serve" : what), name);
}

// "content": a string, null, or a list of {"type": "text", "text": "..."} parts (bare strings in
// the list become text parts, as vLLM reads them). Kept as a list: the template joins the parts.
Err ReadContent(const json& v, const std::string& name, json* out) {
  if (v.is_null() || v.is_string()) {
    *out = v;
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(name, "a string or a list of content parts", v);
  *out = json::array();
  for (const json& part : v) {
    if (part.is_string()) {
      out->push_back({{"type", "text"}, {"text", part}});
      continue;
    }
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return ApiError::BadRequest(StrCat("'", name, "' parts must be objects with a 'type'"), name);
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return ApiError::BadRequest(StrCat("Content part type '", type, "' is not supported; only 'text' is."), name);
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return ApiError::BadRequest(StrCat("'", name, "' text parts need a string 'text'"), name);
    }
    out->push_back({{"type", "text"}, {"text", part["text"]}});
  }
  return std::nullopt;
}

// An assistant message's tool_calls: [{id?, type?: "function", function: {name, arguments}}].
// Arguments given as a JSON string become an object for the template, as vLLM passes them (the
// Gemma 4 template prints an object in its own syntax and a string verbatim).
Err ReadToolCalls(const json& v, const std::string& name, json* out) {
  if (!v.is_array()) return WrongType(name, "a list of tool calls", v);
  *out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = StrCat(name, "[", i, "]");
    json call = v[i];
    if (!call.is_object()) return WrongType(where, "an object", call);
    if (call.contains("type") && call["type"] != "function") {
      return ApiError::BadRequest(StrCat("'", where, ".type' must be \"function\""), name);
    }
    if (call.contains("id") && !call["id"].is_string()) return WrongType(where + ".id", "a string", call["id"]);
    if (!call.contains("function") || !call["function"].is_object()) {
      return ApiError::BadRequest(StrCat("'", where, ".function' must be an object"), name);
    }
    json& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
      return ApiError::BadRequest(StrCat("'", where, ".function.name' must be a non-empty string"), name);
    }
    if (!fn.contains("arguments")) fn["arguments"] = json::object();
    json& args = fn["arguments"];
    if (args.is_string()) {
      auto parsed = ParseOrderedJson(args.get<std::string>(), "");
      if (parsed.ok() && parsed->is_object()) args = std::move(parsed).value();
    } else if (!args.is_object()) {
      return WrongType(where + ".function.arguments", "a JSON object or a string", args);
    }
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

// Messages as the template sees them: checked, content parts normalised, tool-call arguments
// decoded; other keys (name, tool_call_id, reasoning_content, ...) passed through.
Err ReadMessages(const json& v, json* out) {
  if (!v.is_array()) return WrongType("messages", "a list of messages", v);
  if (v.empty()) return ApiError::BadRequest("'messages' must not be empty", "messages");
  *out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(where, "an object", m);
    if (!m.contains("role")) return ApiError::BadRequest(StrCat("'", where, ".role' is required"), "messages");
    std::string role;
    if (auto e = ReadString(m["role"], where + ".role", &role)) return e;
    json msg = json::object();
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& k = it.key();
      if (k == "content") {
        json content;
        if (auto e = ReadContent(it.value(), where + ".content", &content)) return e;
        msg[k] = std::move(content);
      } else if (k == "tool_calls") {
        if (it.value().is_null() || (it.value().is_array() && it.value().empty())) continue;
        if (role != "assistant") {
          return ApiError::BadRequest(StrCat("'", where, ".tool_calls' is only allowed on assistant messages"), "messages");
        }
        json calls;
        if (auto e = ReadToolCalls(it.value(), where + ".tool_calls", &calls)) return e;
        msg[k] = std::move(calls);
      } else if (k == "tool_call_id" || k == "name" || k == "reasoning_content" || k == "reasoning") {
        if (it.value().is_null()) continue;
        std::string text;
        if (auto e = ReadString(it.value(), StrCat(where, ".", k), &text)) return e;
        msg[k] = std::move(text);
      } else {
        msg[k] = it.value();
      }
    }
    if (!msg.contains("content")) msg["content"] = nullptr;
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

// tools: [{type: "function", function: {name, description?, parameters?}}], passed to the template.
Err ReadTools(const json& v, json* out) {
  if (v.is_null()) {
    *out = nullptr;
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType("tools", "a list of tools", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = StrCat("tools[", i, "]");
    const json& t = v[i];
    if (!t.is_object()) return WrongType(where, "an object", t);
    if (!t.contains("type") || t["type"] != "function") {
      return ApiError::BadRequest(StrCat("'", where, ".type' must be \"function\""), "tools");
    }
    if (!t.contains("function") || !t["function"].is_object()) {
      return ApiError::BadRequest(StrCat("'", where, ".function' must be an object"), "tools");
    }
    const json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
      return ApiError::BadRequest(StrCat("'", where, ".function.name' must be a non-empty string"), "tools");
    }
    if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object()) {
      return WrongType(where + ".function.parameters", "a JSON schema object", fn["parameters"]);
    }
  }
  *out = v.empty() ? json(nullptr) : v;
  return std::nullopt;
}

// tool_choice: "none" and "auto" (the model decides; its calls are parsed). "required" and a
// named function need decoding constrained to a call (vLLM's structured outputs), which the
// engine does not have: refused rather than silently "auto".
Err ReadToolChoice(const json& v, std::string* out) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string() && (v == "none" || v == "auto")) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (v.is_string() && v == "required") {
    return Unsupported("tool_choice", "\"required\" is not supported by gemmakit serve (it needs constrained "
                                      "decoding); use \"auto\"");
  }
  if (v.is_object()) {
    return Unsupported("tool_choice", "naming a function is not supported by gemmakit serve (it needs constrained "
                                      "decoding); use \"auto\"");
  }
  return WrongType("tool_choice", "\"none\", \"auto\", \"required\" or a function", v);
}

Err ReadStop(const json& v, std::vector<std::string>* out) {
  out->clear();
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    if (!v.get<std::string>().empty()) out->push_back(v.get<std::string>());
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType("stop", "a string or a list of strings", v);
  for (const json& s : v) {
    if (!s.is_string()) return WrongType("stop", "a string or a list of strings", s);
    if (!s.get<std::string>().empty()) out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]
Err ReadPrompt(const json& v, std::vector<PromptInput>* out) {
  out->clear();
  if (v.is_string()) {
    out->push_back({false, v.get<std::string>(), {}});
    return std::nullopt;
  }
  const char* kExpected = "a string, a list of strings, a list of token ids or a list of token id lists";
  if (!v.is_array()) return WrongType("prompt", kExpected, v);
  if (v.empty()) return ApiError::BadRequest("'prompt' must not be empty", "prompt");
  if (v[0].is_number()) {
    PromptInput p;
    p.is_tokens = true;
    if (auto e = ReadTokenList(v, "prompt", &p.tokens)) return e;
    out->push_back(std::move(p));
    return std::nullopt;
  }
  for (const json& item : v) {
    PromptInput p;
    if (item.is_string()) {
      p.text = item.get<std::string>();
    } else if (item.is_array()) {
      if (item.empty()) return ApiError::BadRequest("'prompt' token lists must not be empty", "prompt");
      p.is_tokens = true;
      if (auto e = ReadTokenList(item, "prompt", &p.tokens)) return e;
    } else {
      return WrongType("prompt", kExpected, item);
    }
    out->push_back(std::move(p));
  }
  return std::nullopt;
}


// Fields accepted and ignored (no effect on the output here).
bool IsIgnoredKnownField(const std::string& k) {
  static const char* const kFields[] = {"user", "request_id", "spaces_between_special_tokens", "length_penalty",
                                        "return_tokens_as_token_ids", "parallel_tool_calls", "mm_processor_kwargs",
                                        "documents", "metadata", "store", "service_tier", "return_token_ids",
                                        "reasoning_effort", "kv_transfer_params", "vllm_xargs",
                                        "stream_options"};
  for (const char* f : kFields) {
    if (k == f) return true;
  }
  return false;
}

// Checks a field that must keep its neutral value.
Err RequireNeutral(const json& v, const std::string& name) {
  if (v.is_null()) return std::nullopt;
  if (name == "presence_penalty" || name == "frequency_penalty" || name == "min_p") {
    double d = 0;
    if (auto e = ReadNumber(v, name, &d)) return e;
    if (d != 0) return Unsupported(name, "other than 0 is not supported by gemmakit serve");
    return std::nullopt;
  }
  if (name == "repetition_penalty") {
    double d = 1;
    if (auto e = ReadNumber(v, name, &d)) return e;
    if (d != 1) return Unsupported(name, "other than 1 is not supported by gemmakit serve");
    return std::nullopt;
  }
  if (name == "best_of") {
    int64_t b = 1;
    if (auto e = ReadInt(v, name, &b)) return e;
    if (b != 1) return Unsupported(name, "is not supported (as in vLLM V1); use n with logprobs instead");
    return std::nullopt;
  }
  if (name == "logit_bias" || name == "allowed_token_ids" || name == "bad_words" ||
      name == "functions" || name == "guided_json" || name == "guided_regex" || name == "guided_choice" ||
      name == "guided_grammar" || name == "structured_outputs" || name == "prompt_logprobs" ||
      name == "chat_template" || name == "guided_decoding_backend" || name == "logits_processors") {
    if ((v.is_array() || v.is_object() || v.is_string()) && v.empty()) return std::nullopt;
    return Unsupported(name);
  }
  if (name == "suffix") {
    if (v.is_string() && v.get<std::string>().empty()) return std::nullopt;
    return Unsupported(name, "is not currently supported");
  }
  if (name == "use_beam_search" || name == "continue_final_message") {
    bool b = false;
    if (auto e = ReadBool(v, name, &b)) return e;
    if (b) return Unsupported(name);
    return std::nullopt;
  }
  if (name == "priority") {
    int64_t p = 0;
    if (auto e = ReadInt(v, name, &p)) return e;
    if (p != 0) return Unsupported(name, "requires priority scheduling, which is not enabled");
    return std::nullopt;
  }
  if (name == "response_format") {
    if (v.is_object() && v.contains("type") && v["type"] == "text") return std::nullopt;
    return Unsupported(name, "other than {\"type\": \"text\"} is not supported by gemmakit serve");
  }
  return std::nullopt;
}

bool IsNeutralField(const std::string& k) {
  static const char* const kFields[] = {
      "presence_penalty", "frequency_penalty", "min_p", "repetition_penalty", "best_of", "logit_bias",
      "allowed_token_ids", "bad_words", "functions", "guided_json", "guided_regex", "guided_choice",
      "guided_grammar", "structured_outputs", "prompt_logprobs", "chat_template", "guided_decoding_backend",
      "logits_processors", "suffix", "use_beam_search", "continue_final_message", "priority",
      "response_format"};
  for (const char* f : kFields) {
    if (k == f) return true;
  }
  return false;
}

// chat_template_kwargs: passed to the template (enable_thinking and whatever else it reads).
Err ReadChatTemplateKwargs(const json& v, json* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("chat_template_kwargs", "an object", v);
  if (v.contains("enable_thinking") && !v["enable_thinking"].is_null() && !v["enable_thinking"].is_boolean()) {
    return WrongType("chat_template_kwargs.enable_thinking", "a boolean", v["enable_thinking"]);
  }
  *out = v;
  return std::nullopt;
}

// Runs a body parser inside GuardedParse (util/guarded_parse.h): whatever it throws is a 400
// naming the problem, never a crashed or 500ing server.
template <class F>
Err Guarded(F&& parse) {
  Result<Err> r = GuardedParse("The request body could not be parsed", std::forward<F>(parse));
  if (!r.ok()) return ApiError::BadRequest(r.message());
  return *r;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

namespace {

std::optional<ApiError> ParseOpenAIRequestUnguarded(std::string_view body, ApiKind kind, OpenAIRequest* out) {
  json j;
  if (auto e = ParseBody(body, &j)) return e;
  OpenAIRequest r;
  r.kind = kind;
  r.add_special_tokens = kind == ApiKind::kCompletion;
  const bool chat = kind == ApiKind::kChat;
  bool have_prompt = false, have_messages = false;
  bool chat_logprobs = false;
  std::optional<int64_t> top_logprobs, max_tokens, max_completion_tokens;
  const json* stream_options = nullptr;
  std::string tool_choice;  // "" = OpenAI's default: "auto" when tools are given

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    Err e;
    int64_t x = 0;
    if (k == "model") {
      if (!v.is_null()) e = ReadString(v, k, &r.model);
    } else if (k == "prompt" && !chat) {
      e = ReadPrompt(v, &r.prompts);
      have_prompt = true;
    } else if (k == "messages" && chat) {
      e = ReadMessages(v, &r.chat.messages);
      have_messages = true;
    } else if (k == "tools" && chat) {
      e = ReadTools(v, &r.chat.tools);
    } else if (k == "tool_choice" && chat) {
      e = ReadToolChoice(v, &tool_choice);
    } else if (k == "include_reasoning" && chat) {
      if (!v.is_null()) e = ReadBool(v, k, &r.include_reasoning);
    } else if (k == "max_tokens" || (chat && k == "max_completion_tokens")) {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &x);
      if (!e && x < 1) e = ApiError::BadRequest(StrCat(k, " must be at least 1, got ", x, "."), k);
      if (!e) (k == "max_tokens" ? max_tokens : max_completion_tokens) = x;
    } else if (k == "temperature") {
      if (v.is_null()) continue;
      e = ReadNumber(v, k, &r.temperature);
      if (!e && !(r.temperature >= 0)) {
        e = ApiError::BadRequest(StrCat("temperature must be non-negative, got ", r.temperature, "."), k);
      }
    } else if (k == "top_p") {
      if (v.is_null()) continue;
      e = ReadNumber(v, k, &r.top_p);
      if (!e && !(r.top_p > 0 && r.top_p <= 1)) {
        e = ApiError::BadRequest(StrCat("top_p must be in (0, 1], got ", r.top_p, "."), k);
      }
    } else if (k == "top_k") {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &x);
      if (!e && x < -1) e = ApiError::BadRequest(StrCat("top_k must be -1 or 0 (disable), or at least 1, got ", x, "."), k);
      if (!e) r.top_k = x <= 0 ? 0 : int(std::min<int64_t>(x, std::numeric_limits<int>::max()));
    } else if (k == "min_tokens") {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &r.min_tokens);
      if (!e && r.min_tokens < 0) {
        e = ApiError::BadRequest(StrCat("min_tokens must be greater than or equal to 0, got ", r.min_tokens, "."), k);
      }
    } else if (k == "seed") {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &x);
      if (!e) r.seed = x;
    } else if (k == "stop") {
      e = ReadStop(v, &r.stop);
    } else if (k == "stop_token_ids") {
      if (!v.is_null()) e = ReadTokenList(v, k, &r.stop_token_ids);
    } else if (k == "include_stop_str_in_output") {
      if (!v.is_null()) e = ReadBool(v, k, &r.include_stop_str_in_output);
    } else if (k == "n") {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &x);
      if (!e && x < 1) e = ApiError::BadRequest(StrCat("n must be at least 1, got ", x, "."), k);
      if (!e && x > kMaxN) e = ApiError::BadRequest(StrCat("n must be at most ", kMaxN, ", got ", x, "."), k);
      if (!e) r.n = int(x);
    } else if (k == "ignore_eos") {
      if (!v.is_null()) e = ReadBool(v, k, &r.ignore_eos);
    } else if (k == "logprobs") {
      if (v.is_null()) continue;
      if (chat) {
        e = ReadBool(v, k, &chat_logprobs);
      } else {
        e = ReadInt(v, k, &x);
        if (!e && (x < 0 || x > kMaxLogprobs)) {
          e = ApiError::BadRequest(StrCat("logprobs must be between 0 and ", kMaxLogprobs, ", got ", x, "."), k);
        }
        if (!e) r.logprobs = int(x);
      }
    } else if (k == "top_logprobs" && chat) {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &x);
      if (!e && (x < 0 || x > kMaxLogprobs)) {
        e = ApiError::BadRequest(StrCat("top_logprobs must be between 0 and ", kMaxLogprobs, ", got ", x, "."), k);
      }
      if (!e) top_logprobs = x;
    } else if (k == "echo") {
      if (v.is_null()) continue;
      e = ReadBool(v, k, &r.echo);
      if (!e && chat && r.echo) e = Unsupported(k, "is not supported for chat completions by gemmakit serve");
    } else if (k == "stream") {
      if (!v.is_null()) e = ReadBool(v, k, &r.stream);
    } else if (k == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) {
        e = WrongType(k, "an object", v);
      } else {
        stream_options = &v;
        if (v.contains("include_usage") && !v["include_usage"].is_null()) {
          e = ReadBool(v["include_usage"], "stream_options.include_usage", &r.include_usage);
        }
        if (!e && v.contains("continuous_usage_stats") && !v["continuous_usage_stats"].is_null()) {
          e = ReadBool(v["continuous_usage_stats"], "stream_options.continuous_usage_stats", &r.continuous_usage_stats);
        }
      }
    } else if (k == "add_special_tokens") {
      if (!v.is_null()) e = ReadBool(v, k, &r.add_special_tokens);
    } else if (k == "skip_special_tokens") {
      if (!v.is_null()) e = ReadBool(v, k, &r.skip_special_tokens);
    } else if (k == "add_generation_prompt" && chat) {
      if (!v.is_null()) e = ReadBool(v, k, &r.chat.add_generation_prompt);
    } else if (k == "chat_template_kwargs" && chat) {
      e = ReadChatTemplateKwargs(v, &r.chat.kwargs);
    } else if (k == "truncate_prompt_tokens") {
      if (v.is_null()) continue;
      e = ReadInt(v, k, &x);
      if (!e && x < 1) e = ApiError::BadRequest(StrCat("truncate_prompt_tokens must be at least 1, got ", x, "."), k);
      if (!e) r.truncate_prompt_tokens = x;
    } else if (k == "cache_salt") {
      if (v.is_null()) continue;
      e = ReadString(v, k, &r.cache_salt);
      if (!e && r.cache_salt.empty()) e = ApiError::BadRequest("cache_salt must not be empty.", k);
    } else if (IsNeutralField(k)) {
      e = RequireNeutral(v, k);
    } else if (IsIgnoredKnownField(k)) {
      // accepted, no effect
    } else {
      r.ignored_fields.push_back(k);
    }
    if (e) return e;
  }

  if (chat) {
    if (!have_messages) return ApiError::BadRequest("'messages' is required", "messages");
    r.parse_tool_calls = !r.chat.tools.is_null() && tool_choice != "none";
    r.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
    if (top_logprobs && !chat_logprobs && *top_logprobs > 0) {
      return ApiError::BadRequest("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs");
    }
    if (chat_logprobs) r.logprobs = int(top_logprobs.value_or(0));
  } else {
    if (!have_prompt) return ApiError::BadRequest("'prompt' is required", "prompt");
    r.max_tokens = max_tokens;
    if (r.echo && r.logprobs >= 0) {
      return Unsupported("echo", "together with logprobs (prompt logprobs) is not supported by gemmakit serve");
    }
    if (int64_t(r.prompts.size()) * r.n > kMaxChoices) {
      return ApiError::BadRequest(StrCat("Too many choices: ", r.prompts.size(), " prompts x n=", r.n,
                                         " is over the limit of ", kMaxChoices, "."), "n");
    }
  }
  if (stream_options && !r.stream) {
    return ApiError::BadRequest("Stream options can only be defined when `stream=True`.", "stream_options");
  }
  if (r.max_tokens && r.min_tokens > *r.max_tokens) {
    return ApiError::BadRequest(StrCat("min_tokens must be less than or equal to max_tokens=", *r.max_tokens,
                                       ", got ", r.min_tokens, "."), "min_tokens");
  }
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseOpenAIRequest(std::string_view body, ApiKind kind, OpenAIRequest* out) {
  return Guarded([&] { return ParseOpenAIRequestUnguarded(body, kind, out); });
}

namespace {

std::optional<ApiError> ParseTokenizeRequestUnguarded(std::string_view body, TokenizeRequest* out) {
  json j;
  if (auto e = ParseBody(body, &j)) return e;
  TokenizeRequest r;
  bool have_prompt = false, have_add_special = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    Err e;
    if (k == "model") {
      if (!v.is_null()) e = ReadString(v, k, &r.model);
    } else if (k == "prompt") {
      e = ReadString(v, k, &r.prompt);
      have_prompt = true;
    } else if (k == "messages") {
      e = ReadMessages(v, &r.chat.messages);
      r.is_chat = true;
    } else if (k == "tools") {
      e = ReadTools(v, &r.chat.tools);
    } else if (k == "add_special_tokens") {
      if (!v.is_null()) e = ReadBool(v, k, &r.add_special_tokens);
      have_add_special = true;
    } else if (k == "add_generation_prompt") {
      if (!v.is_null()) e = ReadBool(v, k, &r.chat.add_generation_prompt);
    } else if (k == "chat_template_kwargs") {
      e = ReadChatTemplateKwargs(v, &r.chat.kwargs);
    }  // other fields (return_token_strs, ...) are ignored
    if (e) return e;
  }
  if (have_prompt == r.is_chat) return ApiError::BadRequest("Give either 'prompt' or 'messages'.");
  if (r.is_chat && !have_add_special) r.add_special_tokens = false;
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseTokenizeRequest(std::string_view body, TokenizeRequest* out) {
  return Guarded([&] { return ParseTokenizeRequestUnguarded(body, out); });
}

namespace {

std::optional<ApiError> ParseDetokenizeRequestUnguarded(std::string_view body, DetokenizeRequest* out) {
  json j;
  if (auto e = ParseBody(body, &j)) return e;
  DetokenizeRequest r;
  bool have_tokens = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    Err e;
    if (it.key() == "model") {
      if (!it.value().is_null()) e = ReadString(it.value(), "model", &r.model);
    } else if (it.key() == "tokens") {
      e = ReadTokenList(it.value(), "tokens", &r.tokens);
      have_tokens = true;
    }
    if (e) return e;
  }
  if (!have_tokens) return ApiError::BadRequest("'tokens' is required", "tokens");
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, DetokenizeRequest* out) {
  return Guarded([&] { return ParseDetokenizeRequestUnguarded(body, out); });
}

std::optional<ApiError> CheckContextLength(const OpenAIRequest& request, int64_t prompt_tokens,
                                           int64_t max_model_len, int64_t* max_tokens) {
  const char* where = request.kind == ApiKind::kChat ? "messages" : "prompt";
  if (prompt_tokens >= max_model_len) {
    return ApiError::BadRequest(
        StrCat("This model's maximum context length is ", max_model_len, " tokens. However, your request has ",
               prompt_tokens, " input tokens. Please reduce the length of the input ", where, "."),
        where);
  }
  if (!request.max_tokens) {
    *max_tokens = request.kind == ApiKind::kChat ? max_model_len - prompt_tokens : 16;
  } else {
    *max_tokens = *request.max_tokens;
  }
  if (*max_tokens > max_model_len - prompt_tokens) {
    // Saturating: max_tokens may be near INT64_MAX.
    const int64_t total = *max_tokens > std::numeric_limits<int64_t>::max() - prompt_tokens
                              ? std::numeric_limits<int64_t>::max()
                              : *max_tokens + prompt_tokens;
    return ApiError::BadRequest(
        StrCat("This model's maximum context length is ", max_model_len, " tokens. However, you requested ", total,
               " tokens (", prompt_tokens, " in the messages, ", *max_tokens,
               " in the completion). Please reduce the length of the messages or completion."),
        request.kind == ApiKind::kChat && request.max_tokens ? "max_completion_tokens" : "max_tokens");
  }
  if (request.min_tokens > *max_tokens) {
    return ApiError::BadRequest(StrCat("min_tokens must be less than or equal to max_tokens=", *max_tokens, ", got ",
                                       request.min_tokens, "."), "min_tokens");
  }
  return std::nullopt;
}

}  // namespace gk::server
