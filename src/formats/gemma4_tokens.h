// Gemma 4 control tokens and the Gemma 3 -> Gemma 4 tokenizer relabelling (spec §4).
//
// Gemma 4 keeps Gemma 3's 262144-slot SentencePiece layout and gives some slots new names:
// the turn markers keep ids 105/106 (<start_of_turn> -> <|turn>, <end_of_turn> -> <turn|>), and
// unused slots become tool, thinking and media tokens. Ordinary text pieces keep their ids, so a
// Gemma 3 tokenizer.json relabelled here encodes text exactly like before.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gk {

struct Gemma4ControlToken {
  int32_t id;
  std::string_view gemma4_name;
  std::string_view gemma3_name;  // what the Gemma 3 tokenizer.json calls the same slot
};

// The relabelled slots, in id order.
std::span<const Gemma4ControlToken> Gemma4ControlTokens();
// The entry for a Gemma 4 name, or nullptr.
const Gemma4ControlToken* FindGemma4ControlToken(std::string_view gemma4_name);

// Gemma 4 vocabulary and embedding rows. Gemma 3's tokenizer.json adds <image_soft_token> at
// 262144, past the embedding; Gemma 4's image soft token is <|image|> (258880) instead.
inline constexpr int32_t kGemma4VocabSize = 262144;

// Rewrites a Gemma 3 tokenizer.json (text) with the Gemma 4 names, in both added_tokens and
// model.vocab; the renamed tokens become special. Drops added tokens with ids >= 262144.
// Idempotent: slots that already carry the Gemma 4 name are accepted. Key order is kept; the
// output is compact JSON.
Result<std::string> RenameToGemma4Tokens(const std::string& gemma3_tokenizer_json);

// The matching tokenizer_config.json: renamed added_tokens_decoder entries, Gemma 4 names for
// eos/boi/eoi/image tokens, add_bos_token false (the template emits <bos>) and gemmakit's Gemma 4
// chat template, which renders what the official Gemma 4 31B template renders for text
// conversations: system turn, thinking, tools, tool calls and results, the generation prompt.
Result<std::string> RenameToGemma4TokenizerConfig(const std::string& gemma3_config_json);

// That chat template's text (what init writes as tokenizer_config.json's "chat_template").
std::string_view Gemma4InitChatTemplate();

}  // namespace gk
