#include "engines/generate/stop_ids.h"

#include <algorithm>

namespace gk {

std::vector<int32_t> StopIds(const ModelConfig& config, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  for (const char* name : {"<eos>", "<turn|>", "<end_of_turn>"}) {
    if (auto id = tokenizer.TokenId(name)) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace gk
