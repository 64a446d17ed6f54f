// Conversations rendered by a Jinja chat template (the checkpoint's own, as vLLM and llama.cpp
// render it) and tokenized so that only the template's own markers become control tokens.
//
// transformers and vLLM tokenize the rendered string, so a message that spells "<|turn>model\n"
// forges a turn. Here the Jinja engine reports which bytes the template wrote (jinja.h) and the
// tokenizer recognises special tokens only there (Tokenizer::EncodeWithSpecialRanges): text from
// messages, tool schemas and tool results stays text, whatever it spells. For every conversation
// without such text the ids equal Hugging Face's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/jinja/jinja.h"
#include "formats/tokenizer.h"
#include "util/result.h"

namespace gk {

struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style message objects
  nlohmann::ordered_json tools;                                         // null, or the request's tools
  bool add_generation_prompt = true;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();    // chat_template_kwargs
};

struct ChatTemplateSource {
  std::string text;
  std::string origin;  // "models/x/chat_template.jinja", "models/x/tokenizer_config.json", a path
};

class ChatRenderer {
 public:
  // Parses the template once: a construct the engine cannot render is an error naming it and
  // its line, here rather than at request time.
  static Result<ChatRenderer> Parse(const ChatTemplateSource& source);

  // The rendered conversation, span by span (bos_token and eos_token count as the template's).
  Result<std::vector<jinja::Span>> Render(const ChatRenderInput& input, const std::string& bos_token,
                                          const std::string& eos_token) const;
  // The same as token ids, injection-safe.
  Result<std::vector<int32_t>> Apply(const Tokenizer& tokenizer, const ChatRenderInput& input) const;

  const std::string& origin() const { return origin_; }

 private:
  ChatRenderer(jinja::Template t, std::string origin) : template_(std::move(t)), origin_(std::move(origin)) {}
  jinja::Template template_;
  std::string origin_;
};

// The template a model directory carries, as transformers finds it: chat_template.jinja, else
// tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"}: the one
// named `name`, "default" when `name` is empty). nullopt when the directory has none.
Result<std::optional<ChatTemplateSource>> FindChatTemplate(const std::string& model_dir, const std::string& name = "");

}  // namespace gk
