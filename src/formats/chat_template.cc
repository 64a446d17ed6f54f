#include "formats/chat_template.h"

#include <optional>
#include <string_view>

#include "formats/gemma4_tokens.h"

namespace gk {
namespace {

enum class Control { kBos, kTurn, kTurnEnd, kThink, kChannel, kChannelEnd };

std::string_view Gemma4Name(Control c) {
  switch (c) {
    case Control::kBos: return "<bos>";
    case Control::kTurn: return "<|turn>";
    case Control::kTurnEnd: return "<turn|>";
    case Control::kThink: return "<|think|>";
    case Control::kChannel: return "<|channel>";
    case Control::kChannelEnd: return "<channel|>";
  }
  return "";
}

std::string_view Gemma3Name(Control c) {
  const Gemma4ControlToken* t = FindGemma4ControlToken(Gemma4Name(c));
  return t != nullptr ? t->gemma3_name : Gemma4Name(c);
}

// A rendered conversation: control tokens and the text between them.
struct Segment {
  std::optional<Control> control;
  std::string text;
};

class Segments {
 public:
  void Add(Control c) { parts_.push_back({c, {}}); }
  void Add(std::string_view text) {
    if (text.empty()) return;
    if (parts_.empty() || parts_.back().control) parts_.push_back({std::nullopt, {}});
    parts_.back().text += text;
  }
  const std::vector<Segment>& parts() const { return parts_; }

 private:
  std::vector<Segment> parts_;
};

// Jinja's `trim` (Python str.strip) on ASCII whitespace.
std::string_view Trim(std::string_view s) {
  const char* kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// The template's strip_thinking: drops every "<|channel>...<channel|>" span, then trims.
std::string StripThinking(std::string_view text) {
  constexpr std::string_view kOpen = "<|channel>", kClose = "<channel|>";
  std::string out;
  for (size_t pos = 0;;) {
    const size_t close = text.find(kClose, pos);
    const std::string_view part = text.substr(pos, close == std::string_view::npos ? close : close - pos);
    out += part.substr(0, part.find(kOpen));
    if (close == std::string_view::npos) break;
    pos = close + kClose.size();
  }
  return std::string(Trim(out));
}

bool IsSystemRole(const std::string& role) { return role == "system" || role == "developer"; }

std::string ModelRole(const std::string& role) { return role == "assistant" ? "model" : role; }

Segments Gemma4Segments(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& o) {
  Segments s;
  s.Add(Control::kBos);
  const bool has_system = !messages.empty() && IsSystemRole(messages[0].role);
  if (o.enable_thinking || has_system) {
    s.Add(Control::kTurn);
    s.Add("system\n");
    if (o.enable_thinking) {  // the official template writes a newline after the marker
      s.Add(Control::kThink);
      s.Add("\n");
    }
    if (has_system) s.Add(Trim(messages[0].content));
    s.Add(Control::kTurnEnd);
    s.Add("\n");
  }
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const std::string role = ModelRole(messages[i].role);
    s.Add(Control::kTurn);
    s.Add(role + "\n");
    s.Add(role == "model" ? StripThinking(messages[i].content) : std::string(Trim(messages[i].content)));
    s.Add(Control::kTurnEnd);
    s.Add("\n");
  }
  if (o.add_generation_prompt) {
    s.Add(Control::kTurn);
    s.Add("model\n");
    if (!o.enable_thinking && o.empty_thought_block) {
      s.Add(Control::kChannel);
      s.Add("thought\n");
      s.Add(Control::kChannelEnd);
    }
  }
  return s;
}

Result<Segments> Gemma3Segments(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  Segments s;
  s.Add(Control::kBos);
  std::string prefix;  // the system text rides at the start of the first user turn (untrimmed)
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    prefix = messages[0].content + "\n\n";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const bool user_turn = (i - first) % 2 == 0;
    if ((messages[i].role == "user") != user_turn) {
      return Status::Error(StrCat("Gemma 3 chat template: message ", i, " has role \"", messages[i].role,
                                  "\"; roles must alternate user/assistant after an optional system"));
    }
    s.Add(Control::kTurn);
    s.Add(ModelRole(messages[i].role) + "\n" + (i == first ? prefix : ""));
    s.Add(Trim(messages[i].content));
    s.Add(Control::kTurnEnd);
    s.Add("\n");
  }
  if (add_generation_prompt) {
    s.Add(Control::kTurn);
    s.Add("model\n");
  }
  return s;
}

// The id of a control token: its Gemma 4 name, else the same slot under its Gemma 3 name.
Result<int32_t> ControlId(const Tokenizer& tok, Control c) {
  if (c == Control::kBos) {
    if (tok.bos_id() >= 0) return tok.bos_id();
    return Status::Error("tokenizer has no <bos> token; use a Gemma tokenizer.json");
  }
  if (auto id = tok.TokenId(Gemma4Name(c))) return *id;
  const Gemma4ControlToken* t = FindGemma4ControlToken(Gemma4Name(c));
  if (t != nullptr && tok.Piece(t->id) == t->gemma3_name) return t->id;
  return Status::Error(StrCat("tokenizer has no ", Gemma4Name(c), " token (nor Gemma 3's ", Gemma3Name(c),
                              " at its id); use a Gemma 4 or Gemma 3 tokenizer.json"));
}

Result<std::vector<int32_t>> ToIds(const Tokenizer& tok, const Segments& s) {
  std::vector<int32_t> ids;
  for (const Segment& seg : s.parts()) {
    if (seg.control) {
      GK_ASSIGN_OR_RETURN(int32_t id, ControlId(tok, *seg.control));
      ids.push_back(id);
    } else {
      const std::vector<int32_t> text = tok.Encode(seg.text, SpecialTokenText::kAsText);
      ids.insert(ids.end(), text.begin(), text.end());
    }
  }
  return ids;
}

std::string ToText(const Segments& s, std::string_view (*name)(Control)) {
  std::string out;
  for (const Segment& seg : s.parts()) out += seg.control ? std::string(name(*seg.control)) : seg.text;
  return out;
}

}  // namespace

Result<std::vector<int32_t>> ApplyGemma4ChatTemplate(const Tokenizer& tokenizer,
                                                     const std::vector<ChatMessage>& messages,
                                                     const ChatTemplateOptions& options) {
  return ToIds(tokenizer, Gemma4Segments(messages, options));
}

std::string RenderGemma4ChatText(const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& options) {
  return ToText(Gemma4Segments(messages, options), Gemma4Name);
}

Result<std::vector<int32_t>> ApplyGemma3ChatTemplate(const Tokenizer& tokenizer,
                                                     const std::vector<ChatMessage>& messages,
                                                     const ChatTemplateOptions& options) {
  GK_ASSIGN_OR_RETURN(Segments s, Gemma3Segments(messages, options.add_generation_prompt));
  return ToIds(tokenizer, s);
}

Result<std::string> RenderGemma3ChatText(const std::vector<ChatMessage>& messages,
                                         const ChatTemplateOptions& options) {
  GK_ASSIGN_OR_RETURN(Segments s, Gemma3Segments(messages, options.add_generation_prompt));
  return ToText(s, Gemma3Name);
}

}  // namespace gk
