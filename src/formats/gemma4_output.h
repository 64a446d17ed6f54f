// What a Gemma 4 model writes back, split the way vLLM's gemma4 reasoning and tool-call parsers
// split it for the OpenAI API:
//   [<|channel>thought\n{reasoning}<channel|>]{content}[<|tool_call>call:NAME{args}<tool_call|>]...
// Tool-call arguments use the chat template's own syntax (format_argument in the official
// template): strings between <|"|> marks, bare keys, {objects}, [arrays], true/false, numbers;
// they become JSON text. A tool call that does not parse stays in the content as text: model
// output is never an error.
//
// Gemma4OutputStream does the same on a stream of decoded text, holding back only what could
// still be the start of a marker, so reasoning and content stream as they are generated and a
// tool call is emitted whole when its closing marker arrives.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gk {

struct Gemma4ToolCall {
  std::string id;         // "call_" + 24 random hex digits, unique per call
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct Gemma4Output {
  std::string reasoning;  // the thought channel's text ("" when there is none)
  std::string content;
  std::vector<Gemma4ToolCall> tool_calls;
};

struct Gemma4OutputOptions {
  bool reasoning = true;   // split off <|channel>thought ... <channel|>
  bool tool_calls = true;  // turn <|tool_call> ... <tool_call|> into calls
};

Gemma4Output ParseGemma4Output(std::string_view text, const Gemma4OutputOptions& options = {});

// `call:NAME{...}` (the text between <|tool_call> and <tool_call|>) as a call; an error when it
// is not in that shape.
Result<Gemma4ToolCall> ParseGemma4ToolCall(std::string_view body);

class Gemma4OutputStream {
 public:
  explicit Gemma4OutputStream(Gemma4OutputOptions options = {}) : options_(options) {}

  // New decoded text in; what can be emitted now out (fields empty when nothing is ready).
  Gemma4Output Add(std::string_view text);
  // End of generation: everything held back (an unfinished tool call comes out as content).
  Gemma4Output Finish();

 private:
  enum class State { kStart, kReasoning, kContent, kToolCall };
  Gemma4Output Drain(bool final);

  Gemma4OutputOptions options_;
  State state_ = State::kStart;
  std::string pending_;
};

}  // namespace gk
