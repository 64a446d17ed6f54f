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

std::optional<ApiError> ApplyChatTemplate(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer,
                                          const ModelConfig& config, bool add_generation_prompt,
                                          bool enable_thinking, std::vector<int32_t>* out) {
  ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.enable_thinking = enable_thinking;
  auto r = config.arch == Arch::kGemma3 ? ApplyGemma3ChatTemplate(tokenizer, messages, o)
                                        : ApplyGemma4ChatTemplate(tokenizer, messages, o);
  if (!r.ok()) return ApiError::BadRequest(r.message(), "messages");
  *out = std::move(*r);
  return std::nullopt;
}

std::optional<ApiError> BuildPrompts(const OpenAIRequest& request, const Tokenizer& tokenizer,
                                     const ModelConfig& config, std::vector<PreparedPrompt>* out) {
  out->clear();
  if (auto e = CheckIds(request.stop_token_ids, config.vocab_size, "stop_token_ids")) return e;
  if (request.kind == ApiKind::kChat) {
    PreparedPrompt p;
    if (auto e = ApplyChatTemplate(request.messages, tokenizer, config, request.add_generation_prompt,
                                   request.enable_thinking, &p.tokens)) {
      return e;
    }
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
