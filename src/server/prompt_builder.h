// Request prompts to token ids: completion prompts (text gets <bos> when add_special_tokens,
// token lists are used as given) and chat messages through the model's chat template
// (Gemma 4's; Gemma 3's for Gemma 3 checkpoints, as `gemmakit generate --chat` chooses).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/chat_template.h"
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
std::optional<ApiError> BuildPrompts(const OpenAIRequest& request, const Tokenizer& tokenizer,
                                     const ModelConfig& config, std::vector<PreparedPrompt>* out);

// The chat template of the model's architecture.
std::optional<ApiError> ApplyChatTemplate(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer,
                                          const ModelConfig& config, bool add_generation_prompt,
                                          bool enable_thinking, std::vector<int32_t>* out);

}  // namespace gk::server
