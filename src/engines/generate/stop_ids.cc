#include "engines/generate/stop_ids.h"

#include <algorithm>

namespace gk {

std::vector<int32_t> StopIds(const ModelConfig& config, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  // <|tool_response>: Gemma 4 writes it after a tool call, to wait for the result
  // (generation_config.json's eos ids [1, 106, 50]).
  for (const char* name : {"<eos>", "<turn|>", "<end_of_turn>", "<|tool_response>"}) {
    if (auto id = tokenizer.TokenId(name)) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace gk
