#include "server/prompt_builder.h"

#include "util/result.h"

namespace gk::server {
namespace {

std::optional<ApiError> CheckIds(const std::vector<int32_t>& ids, int vocab, const char* param) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return ApiError::BadRequest(StrCat("Token id ", id, " is out of vocabulary (", vocab, " tokens)."), param);
    }
  }
  return std::nullopt;
}

}  // namespace

void ApplyDefaultKwargs(const nlohmann::ordered_json& defaults, ChatRenderInput* input) {
  if (!defaults.is_object() || defaults.empty()) return;
  if (!input->kwargs.is_object()) input->kwargs = nlohmann::ordered_json::object();
  for (const auto& [key, value] : defaults.items()) {
    if (!input->kwargs.contains(key)) input->kwargs[key] = value;
  }
}

std::optional<ApiError> ApplyChatTemplate(const ChatRenderInput& input, const Tokenizer& tokenizer,
                                          const ModelConfig& config, const ChatFormat* chat,
                                          std::vector<int32_t>* out) {
  static const ChatFormat kGemma4 = ChatFormat::Builtin(BuiltinChat::kGemma4);
  static const ChatFormat kGemma3 = ChatFormat::Builtin(BuiltinChat::kGemma3);
  const ChatFormat& format = chat ? *chat : config.arch == Arch::kGemma3 ? kGemma3 : kGemma4;
  auto r = format.Apply(tokenizer, input);
  if (!r.ok()) return ApiError::BadRequest(r.message(), "messages");
  *out = std::move(*r);
  return std::nullopt;
}

std::optional<ApiError> BuildPrompts(const OpenAIRequest& request, const Tokenizer& tokenizer,
                                     const ModelConfig& config, const ChatFormat* chat,
                                     std::vector<PreparedPrompt>* out) {
  out->clear();
  if (auto e = CheckIds(request.stop_token_ids, config.vocab_size, "stop_token_ids")) return e;
  if (request.kind == ApiKind::kChat) {
    PreparedPrompt p;
    if (auto e = ApplyChatTemplate(request.chat, tokenizer, config, chat, &p.tokens)) return e;
    out->push_back(std::move(p));
  } else {
    for (const PromptInput& in : request.prompts) {
      PreparedPrompt p;
      if (in.is_tokens) {
        if (auto e = CheckIds(in.tokens, config.vocab_size, "prompt")) return e;
        p.tokens = in.tokens;
        p.echo_text = tokenizer.Decode(p.tokens, request.skip_special_tokens);
      } else {
        if (request.add_special_tokens) p.tokens.push_back(config.bos_token_id);
        for (int32_t id : tokenizer.Encode(in.text)) p.tokens.push_back(id);
        p.echo_text = in.text;
      }
      out->push_back(std::move(p));
    }
  }
  for (PreparedPrompt& p : *out) {
    if (request.truncate_prompt_tokens && int64_t(p.tokens.size()) > *request.truncate_prompt_tokens) {
      p.tokens.erase(p.tokens.begin(), p.tokens.end() - *request.truncate_prompt_tokens);
    }
    if (p.tokens.empty()) {
      return ApiError::BadRequest("The prompt is empty (no tokens after tokenization).",
                                  request.kind == ApiKind::kChat ? "messages" : "prompt");
    }
  }
  return std::nullopt;
}

}  // namespace gk::server
