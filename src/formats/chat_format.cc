#include "formats/chat_format.h"

#include <filesystem>

#include "formats/chat_template.h"
#include "util/atomic_file.h"

namespace gk {

namespace {

// The built-in renderers take plain (role, text) turns.
Result<std::vector<ChatMessage>> PlainTurns(const nlohmann::ordered_json& messages) {
  std::vector<ChatMessage> out;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return Result<std::vector<ChatMessage>>::Error("a message without a string role");
    }
    std::string text;
    const auto content = m.contains("content") ? m["content"] : nlohmann::ordered_json();
    if (content.is_string()) {
      text = content.get<std::string>();
    } else if (content.is_array()) {
      for (const auto& part : content) {
        if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string()) {
          text += part["text"].get<std::string>();
        }
      }
    } else if (!content.is_null()) {
      return Result<std::vector<ChatMessage>>::Error("a message whose content is neither text nor parts");
    }
    if (m.contains("tool_calls") || m["role"] == "tool") {
      return Result<std::vector<ChatMessage>>::Error(
          "the built-in chat template has no tool calls; give the model's template with --chat-template FILE");
    }
    out.push_back({m["role"].get<std::string>(), std::move(text)});
  }
  return out;
}

}  // namespace

Result<ChatFormat> ChatFormat::ForModel(const std::string& model_dir, BuiltinChat builtin,
                                        const std::string& override_template) {
  ChatFormat f;
  f.builtin_ = builtin;
  std::optional<ChatTemplateSource> source;
  const bool looks_like_path = override_template.find('/') != std::string::npos ||
                               override_template.ends_with(".jinja") || override_template.ends_with(".j2");
  if (!override_template.empty() && (looks_like_path || std::filesystem::is_regular_file(override_template))) {
    if (!std::filesystem::is_regular_file(override_template)) {
      return Result<ChatFormat>::Error(StrCat("--chat-template ", override_template, ": no such file"));
    }
    GK_ASSIGN_OR_RETURN(std::string text, ReadFile(override_template));
    source = ChatTemplateSource{std::move(text), override_template};
  } else {
    GK_ASSIGN_OR_RETURN(source, FindChatTemplate(model_dir, override_template));
  }
  if (source) {
    GK_ASSIGN_OR_RETURN(ChatRenderer r, ChatRenderer::Parse(*source));
    f.renderer_ = std::move(r);
  }
  return f;
}

ChatFormat ChatFormat::Builtin(BuiltinChat builtin) {
  ChatFormat f;
  f.builtin_ = builtin;
  return f;
}

Result<ChatFormat> ChatFormat::FromSource(const ChatTemplateSource& source) {
  GK_ASSIGN_OR_RETURN(ChatRenderer r, ChatRenderer::Parse(source));
  ChatFormat f;
  f.renderer_ = std::move(r);
  return f;
}

Result<std::vector<int32_t>> ChatFormat::Apply(const Tokenizer& tokenizer, const ChatRenderInput& input) const {
  if (renderer_) return renderer_->Apply(tokenizer, input);
  if (!input.tools.is_null() && !input.tools.empty()) {
    return Result<std::vector<int32_t>>::Error(
        "the built-in chat template has no tools; give the model's template with --chat-template FILE");
  }
  GK_ASSIGN_OR_RETURN(std::vector<ChatMessage> turns, PlainTurns(input.messages));
  ChatTemplateOptions o;
  o.add_generation_prompt = input.add_generation_prompt;
  if (input.kwargs.is_object() && input.kwargs.contains("enable_thinking")) {
    o.enable_thinking = input.kwargs["enable_thinking"].is_boolean() && input.kwargs["enable_thinking"].get<bool>();
  }
  return builtin_ == BuiltinChat::kGemma3 ? ApplyGemma3ChatTemplate(tokenizer, turns, o)
                                          : ApplyGemma4ChatTemplate(tokenizer, turns, o);
}

std::string ChatFormat::Describe() const {
  if (renderer_) return renderer_->origin();
  return builtin_ == BuiltinChat::kGemma3 ? "built-in Gemma 3 template" : "built-in Gemma 4 template";
}

}  // namespace gk
