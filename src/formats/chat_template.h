// Gemma chat templates rendered directly to token ids (spec §4).
//
// Gemma 4 (the official large-model template; llama.cpp gemma4.jinja agrees):
//   <bos>[<|turn>system\n[<|think|>\n]{system, trimmed}<turn|>\n]
//   <|turn>{role}\n{content, trimmed}<turn|>\n ...        (assistant -> model; model turns drop
//                                                           their <|channel>...<channel|> thoughts)
//   generation prompt: <|turn>model\n [+ <|channel>thought\n<channel|> when thinking is off]
// The system turn appears when the first message is system/developer or thinking is on.
//
// Control tokens are emitted by id, never by tokenizing marker text, and message text is encoded
// with SpecialTokenText::kAsText, so a user who types "<|turn>" gets ordinary text pieces.
// Text between two control tokens is encoded as one string, which gives the same ids as
// tokenizing the rendered template with Hugging Face (the markers are added tokens, so HF splits
// there too). The Gemma 4 names are looked up first; a Gemma 3 tokenizer.json works as well
// because Gemma 4 reuses its slots (<start_of_turn> = <|turn> = 105, <unused94> = <|channel> ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tokenizer.h"
#include "util/result.h"

namespace gk {

struct ChatMessage {
  std::string role;  // system | developer (first message only) | user | assistant | model | ...
  std::string content;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = false;     // opens a system turn with <|think|>
  bool empty_thought_block = true;  // thinking off: pre-close the thought block in the prompt
                                    // (31B/26B template; E2B/E4B reportedly omit it)
};

// <bos> ... as token ids. Fails only when the tokenizer lacks a needed control token.
Result<std::vector<int32_t>> ApplyGemma4ChatTemplate(const Tokenizer& tokenizer,
                                                     const std::vector<ChatMessage>& messages,
                                                     const ChatTemplateOptions& options = {});
// The same conversation as text with the Gemma 4 marker names, for logs and tests.
std::string RenderGemma4ChatText(const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& options = {});

// Gemma 3's template (what the paper trained with):
//   <bos><start_of_turn>user\n{system + "\n\n" if any}{content, trimmed}<end_of_turn>\n
//   <start_of_turn>model\n{content, trimmed}<end_of_turn>\n ... [<start_of_turn>model\n]
// Like the HF template it requires user/model alternation after an optional system message.
// Ids 105/106 are the same in Gemma 4 tokenizers, so either tokenizer works. Of the options only
// add_generation_prompt applies (Gemma 3 has no thinking mode).
Result<std::vector<int32_t>> ApplyGemma3ChatTemplate(const Tokenizer& tokenizer,
                                                     const std::vector<ChatMessage>& messages,
                                                     const ChatTemplateOptions& options = {});
Result<std::string> RenderGemma3ChatText(const std::vector<ChatMessage>& messages,
                                         const ChatTemplateOptions& options = {});

}  // namespace gk
