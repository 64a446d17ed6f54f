#include "tools/data/sft_prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::data {
namespace {

using json = nlohmann::json;

constexpr int32_t kTurnId = 105, kTurnEndId = 106;  // <|turn> <turn|> (Gemma 3: <start_of_turn> <end_of_turn>)
constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kAnswerOpen = "<answer>", kAnswerClose = "</answer>";
constexpr std::string_view kFence = "```", kVerilogFence = "```verilog";
constexpr int64_t kOverCandidates[] = {1024, 2048, 3072, 4096, 8192};
constexpr size_t kMaxExamples = 5;

// Python's str.strip() on ASCII whitespace: what the chat template's `trim` does.
std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

bool IsBlank(std::string_view s) { return Trim(s).empty(); }

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // U+D800..U+DFFF
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + size_t(len) > n) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (int k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    }
    i += size_t(len);
  }
  return true;
}

// Drops the reasoning. Besides well-formed <think>...</think> blocks:
//   * a "</think>" with no opening tag before it ends reasoning that began at the start of the
//     response (some R1-style data puts the opening tag in the prompt template);
//   * an unclosed "<think>" runs to the next "<answer>", or to the end of the text: reasoning
//     that was cut off is not an answer, even when it holds draft code.
std::string RemoveThinking(std::string text) {
  for (;;) {
    const size_t open = text.find(kThinkOpen), close = text.find(kThinkClose);
    if (open == std::string::npos && close == std::string::npos) return text;
    if (close != std::string::npos && (open == std::string::npos || close < open)) {
      text.erase(0, close + kThinkClose.size());
      continue;
    }
    const size_t end = text.find(kThinkClose, open);
    if (end != std::string::npos) {
      text.erase(open, end + kThinkClose.size() - open);
      continue;
    }
    const size_t answer = text.find(kAnswerOpen, open);
    text.erase(open, answer == std::string::npos ? std::string::npos : answer - open);
    return text;
  }
}

// The first ```verilog fence in `text`: its code, or the reason there is none. The info string
// must be exactly "verilog" (the reference's rule; ```systemverilog, ```sv and bare ``` fences do
// not count, so the kept count stays comparable with the reference case's).
bool FirstVerilogBlock(std::string_view text, std::string_view* code, std::string* why) {
  for (size_t pos = text.find(kVerilogFence); pos != std::string_view::npos;
       pos = text.find(kVerilogFence, pos + 1)) {
    const size_t info_end = pos + kVerilogFence.size();
    const size_t eol = text.find('\n', info_end);
    if (eol == std::string_view::npos) break;
    if (!IsBlank(text.substr(info_end, eol - info_end))) continue;  // ```verilog-ams, ```verilogx ...
    const size_t close = text.find(kFence, eol + 1);
    if (close == std::string_view::npos) {
      *why = "the ```verilog block is not closed";
      return false;
    }
    *code = text.substr(eol + 1, close - eol - 1);
    return true;
  }
  *why = "no ```verilog block";
  return false;
}

// Drops leading blank lines (keeping the first code line's indentation) and trailing whitespace.
std::string_view TrimBlankLines(std::string_view code) {
  size_t start = 0;
  for (;;) {
    const size_t eol = code.find('\n', start);
    if (eol == std::string_view::npos || !IsBlank(code.substr(start, eol - start))) break;
    start = eol + 1;
  }
  code.remove_prefix(start);
  const size_t last = code.find_last_not_of(" \t\n\r\f\v");
  return last == std::string_view::npos ? std::string_view() : code.substr(0, last + 1);
}

struct Cleaned {
  std::string answer;
  std::optional<SftDrop> drop;
  std::string why;
};

Cleaned Clean(const std::string& response) {
  const std::string text = RemoveThinking(response);
  std::string_view body = text;
  if (const size_t a = body.find(kAnswerOpen); a != std::string_view::npos) {
    body.remove_prefix(a + kAnswerOpen.size());
    body = body.substr(0, body.find(kAnswerClose));  // an unclosed answer runs to the end
  }
  std::string_view code;
  std::string why;
  if (!FirstVerilogBlock(body, &code, &why)) return {{}, SftDrop::kNoCode, why};
  code = TrimBlankLines(code);
  if (code.empty()) return {{}, SftDrop::kEmpty, "the ```verilog block is empty"};
  return {StrCat("```verilog\n", code, "\n```"), std::nullopt, {}};
}

// The turn markers by id; the slot's name tells a Gemma tokenizer from another one.
Status CheckTurnTokens(const Tokenizer& tok) {
  const std::string& open = tok.Piece(kTurnId);
  const std::string& close = tok.Piece(kTurnEndId);
  if ((open != "<|turn>" && open != "<start_of_turn>") || (close != "<turn|>" && close != "<end_of_turn>")) {
    return Status::Error(StrCat("tokenizer has \"", open, "\" and \"", close, "\" at ids ", kTurnId, " and ",
                                kTurnEndId,
                                ", expected <|turn> and <turn|> (Gemma 4) or <start_of_turn> and <end_of_turn> "
                                "(Gemma 3); use the model's Gemma tokenizer.json"));
  }
  return Status::Ok();
}

// The user turn with the generation prompt (what serving renders), or the finished conversation.
Result<std::vector<int32_t>> Render(const Tokenizer& tok, const ChatFormat& format, const std::string& prompt,
                                    const std::string* answer, bool generation_prompt) {
  ChatRenderInput in;
  in.messages.push_back({{"role", "user"}, {"content", prompt}});
  if (answer != nullptr) in.messages.push_back({{"role", "assistant"}, {"content", *answer}});
  in.add_generation_prompt = generation_prompt;
  return format.Apply(tok, in);
}

bool StartsWith(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// Where the answer starts in `full`, the finished conversation: after `asked`, the prompt's
// rendering, when `full` continues it (Gemma 3). A generation prompt may pre-fill what a finished
// turn leaves out (Gemma 4's empty thought block when thinking is off: <|turn>model\n<|channel>...):
// then where the two part, provided they part inside the generation prompt (past the user turn
// rendered alone) at a marker token of the pre-fill, not in the middle of the turn's header text.
Result<size_t> AnswerStart(const Tokenizer& tok, const ChatFormat& format, const std::string& prompt,
                           const std::vector<int32_t>& asked, const std::vector<int32_t>& full) {
  if (StartsWith(full, asked)) return asked.size();
  GK_ASSIGN_OR_RETURN(const std::vector<int32_t> turns, Render(tok, format, prompt, nullptr, false));
  const size_t common =
      size_t(std::mismatch(asked.begin(), asked.end(), full.begin(), full.end()).first - asked.begin());
  if (!StartsWith(asked, turns) || common <= turns.size() || common == asked.size() || !tok.IsAdded(asked[common])) {
    return Status::Error("its rendering of the conversation does not continue its rendering of the prompt, so the "
                         "answer's tokens cannot be told from the prompt's");
  }
  return common;
}

struct Rendered {
  std::vector<int32_t> tokens;
  size_t begin = 0, end = 0;  // the answer: tokens[begin, end), then its end-of-turn at tokens[end]
};

Result<Rendered> RenderConversation(const Tokenizer& tok, const ChatFormat& format, const std::string& prompt,
                                    const std::string& answer) {
  GK_ASSIGN_OR_RETURN(const std::vector<int32_t> asked, Render(tok, format, prompt, nullptr, true));
  Rendered r;
  GK_ASSIGN_OR_RETURN(r.tokens, Render(tok, format, prompt, &answer, false));
  GK_ASSIGN_OR_RETURN(r.begin, AnswerStart(tok, format, prompt, asked, r.tokens));
  // The answer is data, tokenized injection-safe, so the first end-of-turn after it is the template's.
  const auto end = std::find(r.tokens.begin() + long(r.begin), r.tokens.end(), kTurnEndId);
  if (end == r.tokens.end()) return Status::Error(StrCat("no ", tok.Piece(kTurnEndId), " after the answer"));
  r.end = size_t(end - r.tokens.begin());
  if (r.end == r.begin) return Status::Error("the answer renders empty");
  return r;
}

struct RowOutcome {
  std::optional<TokenRow> row;
  SftDrop drop = SftDrop::kInvalidJson;
  std::string why;
  Status fatal;  // the chat template failed: every row would, so PrepareSft stops
};

RowOutcome ProcessLineUnguarded(const std::string& line, const Tokenizer& tok, const ChatFormat& format,
                                const SftPrepareOptions& o) {
  RowOutcome r;
  auto drop = [&](SftDrop d, std::string why) {
    r.drop = d;
    r.why = std::move(why);
    return std::move(r);
  };
  // Checked before parsing: nlohmann would call it invalid JSON, but the fix is different
  // (re-encode the file as UTF-8).
  if (!IsValidUtf8(line)) return drop(SftDrop::kInvalidUtf8, "the line is not valid UTF-8");
  const auto parsed = ParseJson(line, "");
  if (!parsed.ok()) return drop(SftDrop::kInvalidJson, "not valid JSON");
  const json& j = *parsed;
  if (!j.is_object()) return drop(SftDrop::kInvalidJson, StrCat("a JSON ", j.type_name(), ", not an object"));
  for (const char* key : {"prompt", "response"}) {
    const auto it = j.find(key);
    if (it == j.end()) return drop(SftDrop::kMissingField, StrCat("no \"", key, "\" field"));
    if (!it->is_string())
      return drop(SftDrop::kMissingField, StrCat("\"", key, "\" is a ", it->type_name(), ", not a string"));
  }
  const std::string& prompt = j["prompt"].get_ref<const std::string&>();
  if (Trim(prompt).empty()) return drop(SftDrop::kEmpty, "the prompt is empty");
  Cleaned c = Clean(j["response"].get_ref<const std::string&>());
  if (c.drop) return drop(*c.drop, c.why);
  auto row = TokenizeSftConversation(tok, format, prompt, c.answer, o.loss);
  if (!row.ok()) {  // prompt and answer are non-empty: the template failed
    r.fatal = row.status();
    return r;
  }
  if (int64_t(row->tokens.size()) > o.max_seq_len) {
    return drop(SftDrop::kTooLong, StrCat(row->tokens.size(), " tokens > max_seq_len ", o.max_seq_len));
  }
  r.row = std::move(row).value();
  return r;
}

// A row is outside input: whatever processing it throws drops the row, like any other bad row
// (util/guarded_parse.h).
RowOutcome ProcessLine(const std::string& line, const Tokenizer& tok, const ChatFormat& format,
                       const SftPrepareOptions& o) {
  Result<RowOutcome> r = GuardedParse("", [&] { return ProcessLineUnguarded(line, tok, format, o); });
  if (r.ok()) return std::move(r).value();
  RowOutcome out;
  out.drop = SftDrop::kInvalidJson;
  out.why = r.message();
  return out;
}

// numpy's linear interpolation (np.percentile's default), including its lerp, so results
// match to the last bit.
double Percentile(const std::vector<int64_t>& sorted, double q) {
  const double h = (q / 100.0) * double(sorted.size() - 1);
  const double below = std::floor(h);
  const size_t lo = size_t(below), hi = std::min(lo + 1, sorted.size() - 1);
  const double a = double(sorted[lo]), b = double(sorted[hi]), t = h - below;
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

std::string FormatNumber(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  }
  return buf;
}

}  // namespace

Result<LossMode> ParseLossMode(const std::string& s) {
  if (s == "assistant") return LossMode::kAssistant;
  if (s == "all") return LossMode::kAll;
  return Result<LossMode>::Error(
      StrCat("--loss '", s, "': expected assistant (the model turn only) or all (every token)"));
}

const char* LossModeName(LossMode m) { return m == LossMode::kAssistant ? "assistant" : "all"; }

const char* SftDropName(SftDrop d) {
  switch (d) {
    case SftDrop::kInvalidJson: return "invalid_json";
    case SftDrop::kMissingField: return "missing_field";
    case SftDrop::kNoCode: return "no_code";
    case SftDrop::kEmpty: return "empty";
    case SftDrop::kInvalidUtf8: return "invalid_utf8";
    case SftDrop::kTooLong: return "too_long";
  }
  return "unknown";
}

Result<std::string> CleanCodeV1Response(const std::string& response) {
  Cleaned c = Clean(response);
  if (c.drop) return Result<std::string>::Error(StrCat(SftDropName(*c.drop), ": ", c.why));
  return std::move(c.answer);
}

Result<TokenRow> TokenizeSftConversation(const Tokenizer& tokenizer, const ChatFormat& format,
                                         const std::string& prompt, const std::string& answer, LossMode loss) {
  using R = Result<TokenRow>;
  GK_RETURN_IF_ERROR(CheckTurnTokens(tokenizer));
  if (Trim(prompt).empty() || Trim(answer).empty()) {
    return R::Error(StrCat("SFT conversation: the ", Trim(prompt).empty() ? "prompt" : "answer", " is empty"));
  }
  Result<Rendered> r = RenderConversation(tokenizer, format, prompt, answer);
  if (!r.ok()) return r.status().Wrap(StrCat("chat template ", format.Describe()));
  TokenRow row;
  row.tokens = std::move(r->tokens);
  row.loss_mask.assign(row.tokens.size(), 0);
  if (loss == LossMode::kAll) {
    std::fill(row.loss_mask.begin() + 1, row.loss_mask.end(), 1);
  } else {
    // The answer and its end-of-turn; what the template writes after it ("\n") is no target:
    // generation stops at the end-of-turn.
    std::fill(row.loss_mask.begin() + long(r->begin), row.loss_mask.begin() + long(r->end) + 1, 1);
  }
  return row;
}

Result<std::vector<TokenRow>> PrepareSft(const std::string& jsonl_path, const Tokenizer& tokenizer,
                                         const ChatFormat& format, const SftPrepareOptions& options,
                                         SftPrepareReport* report) {
  using R = Result<std::vector<TokenRow>>;
  if (options.max_seq_len < 1) return R::Error(StrCat("max_seq_len is ", options.max_seq_len, ", must be >= 1"));
  GK_RETURN_IF_ERROR(CheckTurnTokens(tokenizer));  // a wrong tokenizer fails every row: say so once
  GK_RETURN_IF_ERROR(CheckReadableFile(jsonl_path));  // not a directory or /dev/zero, read line by line
  std::ifstream in(jsonl_path, std::ios::binary);
  if (!in) return R::Error(StrCat("cannot open ", jsonl_path, ": ", std::strerror(errno)));
  SftPrepareReport rep;
  for (SftDrop d : {SftDrop::kInvalidJson, SftDrop::kMissingField, SftDrop::kNoCode, SftDrop::kEmpty,
                    SftDrop::kInvalidUtf8, SftDrop::kTooLong}) {
    rep.dropped[SftDropName(d)] = 0;
  }
  std::vector<TokenRow> rows;
  std::string line;
  for (int64_t line_no = 1; (options.max_rows < 0 || rep.raw < options.max_rows) && std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (IsBlank(line)) continue;
    ++rep.raw;
    RowOutcome out = ProcessLine(line, tokenizer, format, options);
    if (!out.fatal.ok()) return out.fatal.Wrap(StrCat(jsonl_path, " line ", line_no));
    if (!out.row) {
      ++rep.dropped[SftDropName(out.drop)];
      if (rep.examples.size() < kMaxExamples) {
        rep.examples.push_back(StrCat("line ", line_no, ": ", SftDropName(out.drop), ": ", out.why));
      }
      continue;
    }
    ++rep.kept;
    rep.tokens += int64_t(out.row->tokens.size());
    for (uint8_t m : out.row->loss_mask) rep.loss_tokens += m;
    rows.push_back(std::move(*out.row));
  }
  if (in.bad()) return R::Error(StrCat("reading ", jsonl_path, ": ", std::strerror(errno)));
  if (report != nullptr) *report = std::move(rep);
  return rows;
}

LengthStats ComputeLengthStats(const std::vector<int64_t>& lengths, int64_t bin_width) {
  LengthStats s;
  s.bin_width = std::max<int64_t>(1, bin_width);
  for (int64_t c : kOverCandidates) s.rows_over[c] = 0;
  if (lengths.empty()) return s;
  std::vector<int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  s.count = int64_t(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  for (int64_t v : sorted) s.total_tokens += v;
  s.mean = double(s.total_tokens) / double(s.count);
  for (const auto& [name, q] : {std::pair<const char*, double>{"p50", 50}, {"p90", 90}, {"p95", 95}, {"p99", 99},
                                {"p99.9", 99.9}}) {
    s.percentiles[name] = Percentile(sorted, q);
  }
  // Bin b holds lengths in ((b-1)·w, b·w], so a length equal to a candidate max_seq_len sits in
  // the bin that ends there, the same side as `rows_over` puts it.
  const int64_t w = s.bin_width;
  auto bin = [w](int64_t v) { return v <= 0 ? 0 : (v + w - 1) / w; };
  const int64_t first = bin(s.min), last = bin(s.max);
  std::vector<int64_t> counts(size_t(last - first + 1), 0);
  for (int64_t v : sorted) ++counts[size_t(bin(v) - first)];
  for (int64_t b = first; b <= last; ++b) s.histogram.emplace_back(b * w, counts[size_t(b - first)]);
  for (int64_t c : kOverCandidates) {
    s.rows_over[c] = int64_t(sorted.end() - std::upper_bound(sorted.begin(), sorted.end(), c));
  }
  return s;
}

std::string FormatLengthStats(const LengthStats& s) {
  if (s.count == 0) return "no rows\n";
  std::string out = StrCat("rows ", s.count, ", tokens ", s.total_tokens, " (per row: min ", s.min, ", mean ",
                           FormatNumber(std::round(s.mean * 10) / 10), ", max ", s.max, ")\n");
  out += "percentiles (tokens per row):";
  for (const char* p : {"p50", "p90", "p95", "p99", "p99.9"}) {
    const auto it = s.percentiles.find(p);
    if (it != s.percentiles.end()) out += StrCat(" ", p, " ", FormatNumber(it->second));
  }
  out += "\nrows over max_seq_len (dropped at that limit):\n";
  char buf[160];
  for (const auto& [limit, n] : s.rows_over) {
    std::snprintf(buf, sizeof(buf), "  %6lld  %8lld  (%6.2f %%; %.2f %% kept)\n", static_cast<long long>(limit),
                  static_cast<long long>(n), 100.0 * double(n) / double(s.count),
                  100.0 * double(s.count - n) / double(s.count));
    out += buf;
  }
  out += StrCat("histogram (tokens per row, bins of ", s.bin_width, "):\n");
  int64_t most = 1;
  for (const auto& [upper, n] : s.histogram) most = std::max(most, n);
  for (size_t i = 0; i < s.histogram.size(); ++i) {
    const auto [upper, n] = s.histogram[i];
    int64_t lower = std::max<int64_t>(0, upper - s.bin_width), end = upper;
    if (n == 0) {  // a run of empty bins is one line, so a long tail stays readable
      while (i + 1 < s.histogram.size() && s.histogram[i + 1].second == 0) end = s.histogram[++i].first;
    }
    const int bar = n == 0 ? 0 : std::max(1, int(std::lround(40.0 * double(n) / double(most))));
    std::snprintf(buf, sizeof(buf), "  (%6lld, %6lld]  %8lld  ", static_cast<long long>(lower),
                  static_cast<long long>(end), static_cast<long long>(n));
    out += buf + std::string(size_t(bar), '#') + "\n";
  }
  return out;
}

}  // namespace gk::data
