// Request prompts to token ids: completion prompts (text gets <bos> when add_special_tokens,
// token lists are used as given) and chat messages through the server's ChatFormat (the
// checkpoint's template, --chat-template, else the built-in one: formats/chat_format.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/chat_format.h"
#include "formats/tokenizer.h"
#include "model/config.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace gk::server {

struct PreparedPrompt {
  std::vector<int32_t> tokens;
  std::string echo_text;  // the prompt as text (for echo)
};

// One PreparedPrompt per completion prompt, or one for the chat messages. Checks token ids
// against the model's vocabulary (prompt and stop_token_ids).
// `chat` null: the built-in template of config.arch.
std::optional<ApiError> BuildPrompts(const OpenAIRequest& request, const Tokenizer& tokenizer,
                                     const ModelConfig& config, const ChatFormat* chat,
                                     std::vector<PreparedPrompt>* out);

// The server's default chat_template_kwargs under the request's (the request's keys win).
void ApplyDefaultKwargs(const nlohmann::ordered_json& defaults, ChatRenderInput* input);

// A conversation's ids; a template error (raise_exception, bad kwargs) is a 400 on "messages".
std::optional<ApiError> ApplyChatTemplate(const ChatRenderInput& input, const Tokenizer& tokenizer,
                                          const ModelConfig& config, const ChatFormat* chat,
                                          std::vector<int32_t>* out);

}  // namespace gk::server
