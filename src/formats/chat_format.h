// Which template renders a model's chats, and rendering with it: `--chat-template FILE` (or the
// NAME of one of the checkpoint's named templates), else the checkpoint's own template
// (chat_template.jinja or tokenizer_config.json, as vLLM and llama.cpp use it), else the built-in
// Gemma 4 / Gemma 3 renderer (chat_template.h) for checkpoints that carry none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/chat_renderer.h"
#include "formats/tokenizer.h"
#include "util/result.h"

namespace gk {

enum class BuiltinChat { kGemma4, kGemma3 };

class ChatFormat {
 public:
  // `override_template`: "" (the checkpoint's), a file path, or a name from tokenizer_config.json's
  // list of templates. Errors name the file and, for a template the engine cannot render, the line.
  static Result<ChatFormat> ForModel(const std::string& model_dir, BuiltinChat builtin,
                                     const std::string& override_template = "");

  // The built-in renderer alone (tests, and servers of checkpoints without a template).
  static ChatFormat Builtin(BuiltinChat builtin);
  // A template the caller holds.
  static Result<ChatFormat> FromSource(const ChatTemplateSource& source);

  Result<std::vector<int32_t>> Apply(const Tokenizer& tokenizer, const ChatRenderInput& input) const;

  // "models/x/chat_template.jinja", "built-in Gemma 4 template", ...
  std::string Describe() const;
  bool builtin() const { return !renderer_.has_value(); }

 private:
  std::optional<ChatRenderer> renderer_;
  BuiltinChat builtin_ = BuiltinChat::kGemma4;
};

}  // namespace gk
