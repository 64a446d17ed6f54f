// The token ids that end a generation by default (what `generate` and `serve` stop at unless the
// client asked for ignore_eos).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/tokenizer.h"
#include "model/config.h"

namespace gk {

// The config's eos ids plus <eos>, the end-of-turn marker (<turn|> in Gemma 4, <end_of_turn> in
// Gemma 3) and Gemma 4's <|tool_response>, sorted and without duplicates.
std::vector<int32_t> StopIds(const ModelConfig& config, const Tokenizer& tokenizer);

}  // namespace gk
