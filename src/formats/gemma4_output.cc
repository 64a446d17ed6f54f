#include "formats/gemma4_output.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <random>

#include <nlohmann/json.hpp>

namespace gk {

namespace {

constexpr std::string_view kChannelOpen = "<|channel>", kChannelClose = "<channel|>";
constexpr std::string_view kCallOpen = "<|tool_call>", kCallClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";
constexpr int kMaxDepth = 64;

// The length of the longest end of `text` that is the start of `marker` (and not all of it).
size_t PartialMarker(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

std::string CallId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "call_%016llx%08x", static_cast<unsigned long long>(rng()),
                static_cast<unsigned>(rng() & 0xffffffffu));
  return buf;
}

// The template's argument syntax, read into JSON.
class ArgumentReader {
 public:
  explicit ArgumentReader(std::string_view s) : s_(s) {}

  Result<nlohmann::ordered_json> Object(int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    if (!Eat("{")) return Error("expected '{'");
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    SkipSpace();
    if (Eat("}")) return obj;
    for (;;) {
      SkipSpace();
      std::string key;
      if (Eat(kQuote)) {
        GK_ASSIGN_OR_RETURN(key, QuotedRest());
      } else {
        const size_t colon = s_.find(':', i_);
        if (colon == std::string_view::npos) return Error("a key without ':'");
        key = Trim(s_.substr(i_, colon - i_));
        if (key.empty() || key.find_first_of("{}[],") != std::string::npos) return Error("a malformed key");
        i_ = colon;
      }
      SkipSpace();
      if (!Eat(":")) return Error("expected ':' after a key");
      GK_ASSIGN_OR_RETURN(obj[key], Value(depth + 1));
      SkipSpace();
      if (Eat("}")) return obj;
      if (!Eat(",")) return Error("expected ',' or '}'");
    }
  }

  bool AtEnd() {
    SkipSpace();
    return i_ == s_.size();
  }

 private:
  Result<nlohmann::ordered_json> Value(int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (Eat(kQuote)) {
      GK_ASSIGN_OR_RETURN(std::string text, QuotedRest());
      return nlohmann::ordered_json(text);
    }
    if (i_ < s_.size() && s_[i_] == '{') return Object(depth + 1);
    if (Eat("[")) {
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      SkipSpace();
      if (Eat("]")) return arr;
      for (;;) {
        GK_ASSIGN_OR_RETURN(nlohmann::ordered_json item, Value(depth + 1));
        arr.push_back(std::move(item));
        SkipSpace();
        if (Eat("]")) return arr;
        if (!Eat(",")) return Error("expected ',' or ']'");
      }
    }
    const size_t end = s_.find_first_of(",}]", i_);
    const std::string word = Trim(s_.substr(i_, end == std::string_view::npos ? s_.size() - i_ : end - i_));
    i_ = end == std::string_view::npos ? s_.size() : end;
    if (word.empty()) return Error("a missing value");
    if (word == "true" || word == "True") return nlohmann::ordered_json(true);
    if (word == "false" || word == "False") return nlohmann::ordered_json(false);
    if (word == "null" || word == "None" || word == "none") return nlohmann::ordered_json(nullptr);
    char* stop = nullptr;
    const long long n = std::strtoll(word.c_str(), &stop, 10);
    if (*stop == '\0') return nlohmann::ordered_json(n);
    const double d = std::strtod(word.c_str(), &stop);
    if (*stop == '\0' && std::isfinite(d)) return nlohmann::ordered_json(d);
    return nlohmann::ordered_json(word);  // a bare word the template would not write: kept as text
  }

  Result<std::string> QuotedRest() {
    const size_t end = s_.find(kQuote, i_);
    if (end == std::string_view::npos) return Error("an unterminated <|\"|> string");
    std::string text(s_.substr(i_, end - i_));
    i_ = end + kQuote.size();
    return text;
  }

  bool Eat(std::string_view token) {
    if (s_.substr(i_, token.size()) != token) return false;
    i_ += token.size();
    return true;
  }
  void SkipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  static std::string Trim(std::string_view t) {
    const size_t a = t.find_first_not_of(" \t\r\n");
    if (a == std::string_view::npos) return "";
    return std::string(t.substr(a, t.find_last_not_of(" \t\r\n") - a + 1));
  }
  Status Error(std::string_view what) const { return Status::Error(StrCat("tool call arguments: ", what, " at ", i_)); }

  std::string_view s_;
  size_t i_ = 0;
};

void Append(Gemma4Output* to, Gemma4Output from) {
  to->reasoning += from.reasoning;
  to->content += from.content;
  for (auto& call : from.tool_calls) to->tool_calls.push_back(std::move(call));
}

}  // namespace

Result<Gemma4ToolCall> ParseGemma4ToolCall(std::string_view body) {
  const size_t start = body.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || body.substr(start, 5) != "call:") {
    return Result<Gemma4ToolCall>::Error("a tool call starts with 'call:'");
  }
  const size_t brace = body.find('{', start);
  if (brace == std::string_view::npos) return Result<Gemma4ToolCall>::Error("a tool call has no '{'");
  Gemma4ToolCall call;
  call.name = std::string(body.substr(start + 5, brace - start - 5));
  for (char c : call.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return Result<Gemma4ToolCall>::Error("a tool call's name has a character names do not have");
    }
  }
  if (call.name.empty()) return Result<Gemma4ToolCall>::Error("a tool call without a name");
  ArgumentReader reader(body.substr(brace));
  GK_ASSIGN_OR_RETURN(nlohmann::ordered_json args, reader.Object(0));
  if (!reader.AtEnd()) return Result<Gemma4ToolCall>::Error("text after a tool call's arguments");
  call.arguments = args.dump();
  call.id = CallId();
  return call;
}

Gemma4Output Gemma4OutputStream::Add(std::string_view text) {
  pending_ += text;
  return Drain(false);
}

Gemma4Output Gemma4OutputStream::Finish() { return Drain(true); }

Gemma4Output Gemma4OutputStream::Drain(bool final) {
  Gemma4Output out;
  for (;;) {
    switch (state_) {
      case State::kStart: {  // a thought channel can only open the output
        if (!options_.reasoning) {
          state_ = State::kContent;
          break;
        }
        if (pending_.starts_with(kChannelOpen)) {
          const size_t nl = pending_.find('\n', kChannelOpen.size());
          if (nl == std::string::npos && !final) return out;  // the channel's name line is not complete
          pending_.erase(0, nl == std::string::npos ? pending_.size() : nl + 1);
          state_ = State::kReasoning;
          break;
        }
        if (!final && std::string_view(kChannelOpen).starts_with(pending_)) return out;  // may still open
        state_ = State::kContent;
        break;
      }
      case State::kReasoning: {
        const size_t close = pending_.find(kChannelClose);
        if (close == std::string::npos) {
          const size_t keep = final ? 0 : PartialMarker(pending_, kChannelClose);
          out.reasoning += pending_.substr(0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return out;
        }
        out.reasoning += pending_.substr(0, close);
        pending_.erase(0, close + kChannelClose.size());
        state_ = State::kContent;
        break;
      }
      case State::kContent: {
        const size_t open = options_.tool_calls ? pending_.find(kCallOpen) : std::string::npos;
        if (open == std::string::npos) {
          const size_t keep = final || !options_.tool_calls ? 0 : PartialMarker(pending_, kCallOpen);
          out.content += pending_.substr(0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return out;
        }
        out.content += pending_.substr(0, open);
        pending_.erase(0, open + kCallOpen.size());
        state_ = State::kToolCall;
        break;
      }
      case State::kToolCall: {
        const size_t close = pending_.find(kCallClose);
        if (close == std::string::npos) {
          if (final) {  // never closed: the text as the model wrote it
            out.content += std::string(kCallOpen) + pending_;
            pending_.clear();
          }
          return out;
        }
        auto call = ParseGemma4ToolCall(std::string_view(pending_).substr(0, close));
        if (call.ok()) {
          out.tool_calls.push_back(std::move(*call));
        } else {
          out.content += std::string(kCallOpen) + pending_.substr(0, close + kCallClose.size());
        }
        pending_.erase(0, close + kCallClose.size());
        state_ = State::kContent;
        break;
      }
    }
  }
}

Gemma4Output ParseGemma4Output(std::string_view text, const Gemma4OutputOptions& options) {
  Gemma4OutputStream stream(options);
  Gemma4Output out = stream.Add(text);
  Append(&out, stream.Finish());
  return out;
}

}  // namespace gk
