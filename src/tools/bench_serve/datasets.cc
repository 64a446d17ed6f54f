#include "tools/bench_serve/datasets.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::bench {
namespace {

constexpr int kMaxFixRounds = 10;  // vLLM's gen_prompt_decode_to_target_len max_retry

using Rng = std::mt19937_64;

// Uniform on the inclusive range [lo, hi] (numpy's integers(lo, hi + 1)).
int64_t UniformInt(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

std::vector<int32_t> AllowedIds(const Tokenizer& tokenizer) {
  std::vector<int32_t> allowed;
  allowed.reserve(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsSpecial(id)) allowed.push_back(id);
  }
  return allowed;
}

int32_t RandomAllowed(Rng& rng, const std::vector<int32_t>& allowed) {
  return allowed[UniformInt(rng, 0, static_cast<int64_t>(allowed.size()) - 1)];
}

struct FittedPrompt {
  std::string text;
  int tokens = 0;  // what text encodes to, without the added tokens
};

// Decodes ids and re-encodes the text until it is exactly `target` tokens: truncating when
// too long, padding with random allowed ids when too short. After the last round the count is
// whatever the text encodes to (vLLM logs the mismatch and keeps it); `tokens` is always the
// count of the returned text. Re-encoding parses special-token text (kParse) because servers do
// the same with a completion prompt: if decoded ordinary tokens happen to spell "<bos>", the
// server counts one token there, and so must prompt_len. vLLM pads with any id in [0, vocab);
// we pad from `allowed` so the prompt never gains a control token the first round avoided.
FittedPrompt FitToLength(const Tokenizer& tokenizer, std::vector<int32_t> ids, size_t target,
                         const std::vector<int32_t>& allowed, Rng& rng) {
  FittedPrompt out;
  for (int round = 0;; ++round) {
    out.text = tokenizer.Decode(ids);
    ids = tokenizer.Encode(out.text, SpecialTokenText::kParse);
    if (round == kMaxFixRounds || ids.size() == target) break;
    if (ids.size() > target) {
      ids.resize(target);
    } else {
      while (ids.size() < target) ids.push_back(RandomAllowed(rng, allowed));
    }
  }
  out.tokens = static_cast<int>(ids.size());
  return out;
}

Status CheckRandomOptions(const RandomDatasetOptions& o) {
  if (o.num_prompts < 1) return Status::Error(StrCat("--num-prompts must be >= 1, got ", o.num_prompts));
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    return Status::Error(StrCat("--random-range-ratio must be in [0, 1), got ", o.range_ratio));
  }
  if (o.prefix_len < 0) return Status::Error(StrCat("--random-prefix-len must be >= 0, got ", o.prefix_len));
  return Status::Ok();
}

Status LineError(const std::string& path, size_t line, const std::string& why) {
  return Status::Error(StrCat(path, ":", line, ": ", why));
}

// "output_len" (or "max_tokens") of one JSONL object; 0 when it has neither.
Result<int> OutputLenOf(const nlohmann::json& obj, const std::string& path, size_t line) {
  for (const char* key : {"output_len", "max_tokens"}) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) continue;
    const bool integral = it->is_number_integer() || (it->is_number_float() && std::isfinite(it->get<double>()) &&
                                                      std::floor(it->get<double>()) == it->get<double>());
    if (!integral || it->get<double>() < 1 || it->get<double>() > 1e9) {
      return LineError(path, line, StrCat("\"", key, "\" must be a positive integer, got ", it->dump()));
    }
    return static_cast<int>(it->get<double>());
  }
  return 0;
}

struct JsonlEntry {
  std::string prompt;
  int output_len = 0;
};

Result<JsonlEntry> ParseJsonlLine(std::string_view text, const std::string& path, size_t line,
                                  int default_output_len) {
  auto parsed = ParseJson(text, "");  // "not valid JSON: ..."
  if (!parsed.ok()) return LineError(path, line, parsed.message());
  const nlohmann::json obj = std::move(parsed).value();
  if (!obj.is_object()) return LineError(path, line, "expected a JSON object with a \"prompt\" string");
  const auto prompt = obj.find("prompt");
  if (prompt == obj.end() || !prompt->is_string()) return LineError(path, line, "no \"prompt\" string");
  GK_ASSIGN_OR_RETURN(int output_len, OutputLenOf(obj, path, line));
  if (output_len == 0) output_len = default_output_len;
  if (output_len < 1) {
    return LineError(path, line, StrCat("no \"output_len\" or \"max_tokens\", and the default output length ",
                                        default_output_len, " is not positive"));
  }
  return JsonlEntry{prompt->get<std::string>(), output_len};
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

int NumSpecialTokensToAdd(const Tokenizer& tokenizer) { return tokenizer.bos_id() >= 0 ? 1 : 0; }

Result<std::vector<SampleRequest>> SampleRandom(const RandomDatasetOptions& options, const Tokenizer& tokenizer) {
  const RandomDatasetOptions& o = options;
  GK_RETURN_IF_ERROR(CheckRandomOptions(o));
  const int added = NumSpecialTokensToAdd(tokenizer);
  const double body_len = std::max(0, o.input_len - added), r = o.range_ratio;
  const int64_t in_lo = static_cast<int64_t>(std::floor(body_len * (1 - r)));
  const int64_t in_hi = static_cast<int64_t>(std::ceil(body_len * (1 + r)));
  // vLLM's rule: the shortest possible prompt (prefix + sampled body) must have a token.
  if (o.prefix_len + in_lo < 1) {
    return Status::Error(StrCat("--random-input-len ", o.input_len, " is too small: the tokenizer adds ", added,
                                " token(s), so with --random-range-ratio ", r, " and --random-prefix-len ",
                                o.prefix_len, " a prompt could be empty; raise the input or prefix length"));
  }
  const int64_t out_lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.output_len * (1 - r))));
  const int64_t out_hi = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.output_len * (1 + r))));
  const std::vector<int32_t> allowed = AllowedIds(tokenizer);
  if (allowed.empty()) return Status::Error("the tokenizer has no ordinary (non-special) tokens to build prompts from");

  // Draw in vLLM's order: all input lengths, all output lengths, all offsets, then the prefix.
  Rng rng(o.seed);
  const size_t n = static_cast<size_t>(o.num_prompts);
  std::vector<int64_t> input_lens(n), output_lens(n), offsets(n);
  for (int64_t& v : input_lens) v = UniformInt(rng, in_lo, in_hi);
  for (int64_t& v : output_lens) v = UniformInt(rng, out_lo, out_hi);
  for (int64_t& v : offsets) v = UniformInt(rng, 0, tokenizer.vocab_size() - 1);
  std::vector<int32_t> prefix(o.prefix_len);
  for (int32_t& id : prefix) id = RandomAllowed(rng, allowed);

  const int64_t m = static_cast<int64_t>(allowed.size());
  std::vector<SampleRequest> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids = prefix;
    for (int64_t j = 0; j < input_lens[i]; ++j) ids.push_back(allowed[(offsets[i] + int64_t(i) + j) % m]);
    FittedPrompt fit = FitToLength(tokenizer, std::move(ids), prefix.size() + input_lens[i], allowed, rng);
    out.push_back({std::move(fit.text), fit.tokens + added, static_cast<int>(output_lens[i])});
  }
  return out;
}

namespace {

Result<std::vector<SampleRequest>> LoadJsonlUnguarded(const std::string& path, int default_output_len,
                                                      int num_prompts, const Tokenizer* tokenizer) {
  GK_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  // Every line is checked, so a bad file fails the same way whatever --num-prompts is.
  std::vector<JsonlEntry> entries;
  size_t line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view body(text.data() + pos, nl - pos);
    ++line;
    pos = nl + 1;
    if (IsBlank(body)) continue;
    GK_ASSIGN_OR_RETURN(JsonlEntry e, ParseJsonlLine(body, path, line, default_output_len));
    entries.push_back(std::move(e));
  }
  if (entries.empty()) return Status::Error(StrCat(path, ": no prompts (the file is empty or only blank lines)"));
  const size_t count = num_prompts > 0 ? size_t(num_prompts) : entries.size();
  std::vector<SampleRequest> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (i >= entries.size()) {  // cycling: the same prompt again, already counted
      out.push_back(out[i % entries.size()]);
      continue;
    }
    int prompt_len = 0;  // unknown: the server's usage.prompt_tokens fills it in
    if (tokenizer != nullptr) {
      prompt_len = int(tokenizer->Encode(entries[i].prompt).size()) + NumSpecialTokensToAdd(*tokenizer);
    }
    out.push_back({std::move(entries[i].prompt), prompt_len, entries[i].output_len});
  }
  return out;
}

}  // namespace

// The data set is outside input: whatever parsing it throws is an error (util/guarded_parse.h).
Result<std::vector<SampleRequest>> LoadJsonl(const std::string& path, int default_output_len, int num_prompts,
                                             const Tokenizer* tokenizer) {
  return GuardedParse(path, [&] { return LoadJsonlUnguarded(path, default_output_len, num_prompts, tokenizer); });
}

}  // namespace gk::bench
