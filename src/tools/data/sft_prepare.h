// CodeV-R1 SFT rows -> tokenized conversations with a loss mask (`gemmakit data prepare`), and
// the length statistics used to choose max_seq_len (`gemmakit data stats`).
// The recipe is the reference case's (../shared/paper/FACTS.md §1 items 1-2):
//   * a row is a JSON object with string fields "prompt" and "response" ("system" is read but
//     dropped: the Gemma chat template of the reference had no system role, and rows stay the
//     reference's; a template may still write a system turn of its own);
//   * the response's <think>...</think> block is removed; inside <answer>...</answer> (or the
//     whole remaining text when there is no answer block) the first ```verilog fenced block is
//     kept and re-emitted as "```verilog\n<code>\n```";
//   * conversation = one user turn (the prompt) and one model turn (the cleaned answer), rendered
//     by the model's chat template (ChatFormat: --chat-template, else the checkpoint's
//     chat_template.jinja / tokenizer_config.json, else the built-in Gemma 4 / Gemma 3 one), so
//     training sees the serving format; tokenized injection-safe (a prompt spelling "<|turn>"
//     gets ordinary pieces);
//   * loss "assistant": the mask covers what follows the prompt's rendering (the user turn and
//     the generation prompt) up to and including the end-of-turn token (<turn|> / Gemma 3's
//     <end_of_turn>, id 106), not what the template writes after it;
//     loss "all": every token after the first (the GPU baseline's objective);
//   * rows longer than max_seq_len tokens are dropped, not truncated.
// With the built-in template (and the one `gemmakit init` writes, and the official Gemma 4 31B
// one) a row is
//   <bos> <|turn> "user\n{prompt, trimmed}" <turn|> "\n" <|turn> "model\n" {answer, trimmed} <turn|> "\n"
//   loss mask, assistant: 0 up to and including "model\n", 1 on the answer and its <turn|>, 0 on the "\n";
//   loss mask, all: 0 on <bos>, 1 on every other token.
// i.e. the template's rendering of (user, assistant) without a generation prompt: a finished turn
// carries no empty thought block, though Gemma 4's generation prompt adds one, so the answer
// starts where the two renderings part (AnswerStart in the .cc). The trailing "\n" is kept (the
// reference's "<end_of_turn>\n") but is never a target in assistant mode: generation stops at <turn|>.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/chat_format.h"
#include "formats/token_dataset.h"
#include "formats/tokenizer.h"
#include "util/result.h"

namespace gk::data {

enum class LossMode { kAssistant, kAll };
Result<LossMode> ParseLossMode(const std::string& s);  // "assistant" | "all"
const char* LossModeName(LossMode m);

// Why a row was not kept (counted by PrepareSft).
enum class SftDrop {
  kInvalidJson,     // not valid JSON, or not a JSON object
  kMissingField,    // "prompt" or "response" missing or not a string
  kNoCode,          // no ```verilog block in the answer
  kEmpty,           // prompt or code empty after cleaning
  kInvalidUtf8,     // the line is not valid UTF-8 (checked before parsing, so never invalid_json)
  kTooLong,         // over max_seq_len tokens
};
const char* SftDropName(SftDrop d);

// The cleaned model turn of a response: "```verilog\n<code>\n```", or an error saying which
// rule failed ("no_code: ..." / "empty: ..."). Every <think>...</think> goes; an unclosed
// <think> runs to <answer> or the end, a </think> with no opening tag ends reasoning that began
// at the start. Within <answer>...</answer> (unclosed: to the end), else the whole remaining
// text, the first fence with info string exactly "verilog" (not systemverilog/sv/bare; an
// unclosed fence is no code); its leading blank lines and trailing whitespace are trimmed.
Result<std::string> CleanCodeV1Response(const std::string& response);

struct SftPrepareOptions {
  int64_t max_seq_len = 3072;
  LossMode loss = LossMode::kAssistant;
  int64_t max_rows = -1;  // read at most this many input lines (-1: all); the reference case used 10,000
};

struct SftPrepareReport {
  int64_t raw = 0;   // input lines (blank lines are not rows)
  int64_t kept = 0;
  std::map<std::string, int64_t> dropped;  // SftDropName -> count
  std::vector<std::string> examples;       // up to 5 "line N: reason" messages for the summary
  int64_t tokens = 0, loss_tokens = 0;     // over kept rows
};

// Renders one conversation (user prompt, model answer) through `format` and tokenizes it with its
// loss mask. Errors name the template when its renderings do not fit together (the conversation
// does not continue the prompt, or no end-of-turn token follows the answer).
Result<TokenRow> TokenizeSftConversation(const Tokenizer& tokenizer, const ChatFormat& format,
                                         const std::string& prompt, const std::string& answer,
                                         LossMode loss);

// Reads a CodeV-R1 JSONL file; bad rows are counted and skipped. Errors when the file cannot be
// read, or when the chat template fails on a row ("line N: chat template X: ..."): that is the
// template's fault, not the row's, and would drop every row.
Result<std::vector<TokenRow>> PrepareSft(const std::string& jsonl_path, const Tokenizer& tokenizer,
                                         const ChatFormat& format, const SftPrepareOptions& options,
                                         SftPrepareReport* report);

// Token-length statistics of a set of rows: count, min, max, mean, percentiles
// (p50, p90, p95, p99, p99.9 by linear interpolation, numpy's default), and a histogram.
struct LengthStats {
  int64_t count = 0, min = 0, max = 0;
  int64_t total_tokens = 0;
  double mean = 0;
  int64_t bin_width = 256;
  std::map<std::string, double> percentiles;  // "p50" ... "p99.9"
  // (bin upper bound u, rows with length in (u - bin_width, u]), contiguous from the shortest
  // row's bin to the longest's.
  std::vector<std::pair<int64_t, int64_t>> histogram;
  std::map<int64_t, int64_t> rows_over;  // for max_seq_len candidates 1024, 2048, 3072, 4096, 8192: rows longer
};
LengthStats ComputeLengthStats(const std::vector<int64_t>& lengths, int64_t bin_width = 256);
std::string FormatLengthStats(const LengthStats& s);  // the text `data stats` prints

}  // namespace gk::data
