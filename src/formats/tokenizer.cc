#include "formats/tokenizer.h"

#include <algorithm>
#include <queue>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

using json = nlohmann::json;

enum TokenFlags : uint8_t { kAdded = 1, kSpecial = 2, kLstrip = 4, kRstrip = 8 };

// Ids past this are certainly a corrupt file; guards the id -> piece table allocation.
constexpr int64_t kMaxTokenId = int64_t{1} << 26;
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

struct Utf8Scan {
  int len;         // bytes consumed: the character, or the maximal invalid subpart
  bool valid;
  bool truncated;  // input ended inside a character that was valid so far
  uint32_t cp;     // the code point when valid
};

// Decodes one character at s[i] following Unicode Table 3-7 (no overlongs or surrogates).
Utf8Scan ScanUtf8(std::string_view s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return {1, true, false, b};
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t cp;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1, cp = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2, cp = b & 0x0F;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3, cp = b & 0x07;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false, 0};
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false, true, 0};
    const uint8_t c = static_cast<uint8_t>(s[i + k]);
    if (c < lo || c > hi) return {k, false, false, 0};
    cp = (cp << 6) | (c & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {need + 1, true, false, cp};
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty() || s->find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s->size() + s->size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s->find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(*s, pos, hit - pos).append(to);
  }
  out.append(*s, pos, std::string::npos);
  *s = std::move(out);
}

bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// <0xAB> -> 0xAB, or -1.
int ByteTokenValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int h = hex(piece[3]), l = hex(piece[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

std::string ByteTokenName(uint8_t b) {
  static const char* kHex = "0123456789ABCDEF";
  return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
}

// j[key] by reference, or null when absent (json::value() would copy).
const json& Field(const json& j, const char* key) {
  static const json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A {"String": s} pattern. Regex patterns would need a regex engine matching Rust's.
Result<std::string> StringPattern(const json& step, const std::string& where) {
  const json& p = Field(step, "pattern");
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    return p["String"].get<std::string>();
  }
  return Result<std::string>::Error(StrCat(
      where, ": pattern ", p.dump(), " is not supported; only {\"String\": ...} patterns are"));
}

std::string GetString(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int GetInt(const json& j, const char* key, int fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

bool GetBool(const json& j, const char* key, bool fallback = false) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// Flattens nested Sequence steps of normalizers, pre-tokenizers or decoders.
void Flatten(const json& step, const char* list_key, std::vector<const json*>* out) {
  if (step.is_null()) return;
  if (GetString(step, "type") == "Sequence" && step.contains(list_key)) {
    for (const json& s : step[list_key]) Flatten(s, list_key, out);
  } else {
    out->push_back(&step);
  }
}

Result<std::vector<Tokenizer::NormalizerStep>> ParseNormalizer(const json& root,
                                                               const std::string& origin) {
  std::vector<const json*> steps;
  Flatten(Field(root, "normalizer"), "normalizers", &steps);
  std::vector<Tokenizer::NormalizerStep> out;
  for (const json* s : steps) {
    const std::string type = GetString(*s, "type"), where = StrCat(origin, " normalizer ", type);
    if (type == "Replace") {
      GK_ASSIGN_OR_RETURN(std::string pattern, StringPattern(*s, where));
      out.push_back({Tokenizer::NormalizerStep::kReplace, pattern, GetString(*s, "content")});
    } else if (type == "Prepend") {
      out.push_back({Tokenizer::NormalizerStep::kPrepend, "", GetString(*s, "prepend")});
    } else {
      return Status::Error(StrCat(where, " is not supported (Replace, Prepend and Sequence are); "
                                         "use a Gemma tokenizer.json"));
    }
  }
  return out;
}

Result<std::vector<Tokenizer::PreTokenizerStep>> ParsePreTokenizer(const json& root,
                                                                   const std::string& origin) {
  std::vector<const json*> steps;
  Flatten(Field(root, "pre_tokenizer"), "pretokenizers", &steps);
  std::vector<Tokenizer::PreTokenizerStep> out;
  for (const json* s : steps) {
    const std::string type = GetString(*s, "type"), where = StrCat(origin, " pre_tokenizer ", type);
    Tokenizer::PreTokenizerStep step{};
    if (type == "Split") {
      step.kind = Tokenizer::PreTokenizerStep::kSplit;
      GK_ASSIGN_OR_RETURN(step.pattern, StringPattern(*s, where));
      step.behavior = GetString(*s, "behavior", "Isolated");
      std::transform(step.behavior.begin(), step.behavior.end(), step.behavior.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (GetBool(*s, "invert") || step.pattern.empty()) {
        return Status::Error(StrCat(where, ": invert=true or an empty pattern is not supported"));
      }
    } else if (type == "Metaspace") {
      step.kind = Tokenizer::PreTokenizerStep::kMetaspace;
      step.pattern = GetString(*s, "replacement", "\xE2\x96\x81");
      // Old files say add_prefix_space instead of prepend_scheme.
      step.prepend_scheme = GetString(*s, "prepend_scheme",
                                      GetBool(*s, "add_prefix_space", true) ? "always" : "never");
      step.split = GetBool(*s, "split", true);
    } else {
      return Status::Error(StrCat(where, " is not supported (Split, Metaspace and Sequence are); "
                                         "use a Gemma tokenizer.json"));
    }
    out.push_back(std::move(step));
  }
  return out;
}

Result<std::vector<Tokenizer::DecoderStep>> ParseDecoder(const json& root,
                                                         const std::string& origin) {
  std::vector<const json*> steps;
  Flatten(Field(root, "decoder"), "decoders", &steps);
  std::vector<Tokenizer::DecoderStep> out;
  for (const json* s : steps) {
    const std::string type = GetString(*s, "type"), where = StrCat(origin, " decoder ", type);
    Tokenizer::DecoderStep step{};
    if (type == "Replace") {
      step.kind = Tokenizer::DecoderStep::kReplace;
      GK_ASSIGN_OR_RETURN(step.pattern, StringPattern(*s, where));
      step.content = GetString(*s, "content");
    } else if (type == "ByteFallback") {
      step.kind = Tokenizer::DecoderStep::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = Tokenizer::DecoderStep::kFuse;
    } else if (type == "Strip") {
      step.kind = Tokenizer::DecoderStep::kStrip;
      step.content = GetString(*s, "content", " ");
      step.start = GetInt(*s, "start");
      step.stop = GetInt(*s, "stop");
    } else if (type == "Metaspace") {
      step.kind = Tokenizer::DecoderStep::kMetaspace;
      step.pattern = GetString(*s, "replacement", "\xE2\x96\x81");
      const std::string scheme = GetString(
          *s, "prepend_scheme", GetBool(*s, "add_prefix_space", true) ? "always" : "never");
      step.strip_first_space = scheme != "never";
    } else {
      return Status::Error(StrCat(where, " is not supported (Replace, ByteFallback, Fuse, Strip, "
                                         "Metaspace and Sequence are); use a Gemma tokenizer.json"));
    }
    out.push_back(std::move(step));
  }
  return out;
}

// Splits `w` on `delim` into text and delimiter segments, combined per the tokenizers crate's
// SplitDelimiterBehavior (same fold rules as its Rust code).
void SplitWord(const std::string& w, const std::string& delim, const std::string& behavior,
               std::vector<std::string>* out) {
  std::vector<std::pair<std::string, bool>> segs;  // (text, is_delimiter)
  size_t pos = 0;
  for (size_t hit; (hit = w.find(delim, pos)) != std::string::npos; pos = hit + delim.size()) {
    if (hit > pos) segs.emplace_back(w.substr(pos, hit - pos), false);
    segs.emplace_back(delim, true);
  }
  if (pos < w.size()) segs.emplace_back(w.substr(pos), false);

  std::vector<std::pair<std::string, bool>> merged;
  if (behavior == "merged_with_next") {  // a delimiter joins the text after it
    for (size_t i = segs.size(); i-- > 0;) {
      const bool next_is_text = !merged.empty() && !merged.back().second;
      if (segs[i].second && next_is_text) {
        merged.back().first.insert(0, segs[i].first);
        merged.back().second = true;  // now starts with a delimiter: the one before stays alone
      } else {
        merged.push_back(segs[i]);
      }
    }
    std::reverse(merged.begin(), merged.end());
  } else {
    bool prev_delim = false;
    for (auto& seg : segs) {
      const bool is_delim = seg.second;
      if (behavior == "removed" && is_delim) {
        // dropped
      } else if (behavior == "merged_with_previous" && is_delim && !prev_delim && !merged.empty()) {
        merged.back().first += seg.first;
      } else if (behavior == "contiguous" && is_delim && prev_delim && !merged.empty()) {
        merged.back().first += seg.first;
      } else {
        merged.push_back(std::move(seg));
      }
      prev_delim = is_delim;
    }
  }
  for (auto& seg : merged) out->push_back(std::move(seg.first));
}

// Applies one pre-tokenizer step to every word, like the tokenizers crate does.
void PreTokenize(const Tokenizer::PreTokenizerStep& step, bool first_section,
                 std::vector<std::string>* words) {
  std::vector<std::string> out;
  for (size_t i = 0; i < words->size(); ++i) {
    std::string& w = (*words)[i];
    if (step.kind == Tokenizer::PreTokenizerStep::kSplit) {
      SplitWord(w, step.pattern, step.behavior, &out);
      continue;
    }
    const std::string& repl = step.pattern;  // Metaspace
    ReplaceAll(&w, " ", repl);
    const bool prepend = step.prepend_scheme == "always" ||
                         (step.prepend_scheme == "first" && first_section && i == 0);
    if (prepend && w.compare(0, repl.size(), repl) != 0) w.insert(0, repl);
    if (step.split) {
      SplitWord(w, repl, "merged_with_next", &out);
    } else {
      out.push_back(std::move(w));
    }
  }
  *words = std::move(out);
}

}  // namespace

void AppendValidUtf8(std::string_view bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Scan scan = ScanUtf8(bytes, i);
    if (scan.valid) {
      out->append(bytes.substr(i, scan.len));
    } else {
      out->append(kReplacementChar);
    }
    i += scan.len;
  }
}

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Only the last three bytes can start an unfinished character.
  const size_t from = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t i = from; i < bytes.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    if (b >= 0xC2 && b <= 0xF4 && ScanUtf8(bytes, i).truncated) return i;
  }
  return bytes.size();
}

struct Tokenizer::RawModel {
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::string error;  // first malformed vocab entry or merge
};

// Moves model.vocab and model.merges out of the parse into `raw` as they stream past, so the
// DOM never holds ~800k small nodes (building and freeing them dominated load time).
Result<json> Tokenizer::ParseCapturingModel(std::string_view text, RawModel& raw, const std::string& origin) {
  std::vector<std::string> path(4);  // object keys at depth 1..3
  std::string key;
  auto in_model = [&](const char* field) { return path[1] == "model" && path[2] == field; };
  auto fail = [&](std::string msg) {
    if (raw.error.empty()) raw.error = std::move(msg);
    return false;
  };
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (event == E::key && depth <= 3) {
      path[depth] = parsed.get<std::string>();
      if (depth < 3 || !in_model("vocab")) return true;
      key = path[3];
      return false;  // kept keys would be inserted into the DOM object before their value
    }
    if (depth != 3 || !(event == E::value || event == E::array_end)) return true;
    if (in_model("vocab") && event == E::value) {
      if (!parsed.is_number_integer()) {
        return fail(StrCat("model.vocab[\"", key, "\"] = ", parsed.dump(), " is not an integer id"));
      }
      raw.vocab.emplace_back(std::move(key), parsed.get<int64_t>());
      return false;
    }
    if (!in_model("merges")) return true;
    const size_t index = raw.merges.size();
    if (parsed.is_string()) {  // "left right"
      const std::string& m = parsed.get_ref<const std::string&>();
      const size_t sp = m.find(' ');
      if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos) {
        return fail(StrCat("model.merges[", index, "] \"", m, "\" is not two pieces separated by one space"));
      }
      raw.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    } else if (parsed.is_array() && parsed.size() == 2 && parsed[0].is_string() && parsed[1].is_string()) {
      raw.merges.emplace_back(std::move(parsed[0].get_ref<std::string&>()),
                              std::move(parsed[1].get_ref<std::string&>()));
    } else {
      return fail(StrCat("model.merges[", index, "] is ", parsed.dump(), "; expected \"a b\" or [\"a\", \"b\"]"));
    }
    return false;
  };
  return ParseJson(text, origin, callback);
}

namespace {

uint32_t HashPiece(std::string_view s) { return static_cast<uint32_t>(std::hash<std::string_view>{}(s)); }
uint64_t HashKey(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) >> 20; }
size_t TableSize(size_t n) {  // power of two, at most half full
  size_t size = 1024;
  while (size < 2 * n) size *= 2;
  return size;
}

}  // namespace

Result<Tokenizer> Tokenizer::Load(const std::string& path) {
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return FromJson(text, path);
}

// tokenizer.json is outside input: whatever its parsing throws becomes an error naming it.
Result<Tokenizer> Tokenizer::FromJson(std::string_view json_text, const std::string& origin) {
  return GuardedParse(origin, [&] { return FromJsonUnguarded(json_text, origin); });
}

Result<Tokenizer> Tokenizer::FromJsonUnguarded(std::string_view json_text, const std::string& origin) {
  RawModel raw;
  auto parsed = ParseCapturingModel(json_text, raw, origin);
  if (!parsed.ok()) return Status::Error(StrCat(parsed.message(), "; re-download the tokenizer.json"));
  const json root = std::move(parsed).value();
  if (root.is_discarded() || !root.is_object()) {
    return Status::Error(StrCat(origin, " is not a JSON object; re-download the tokenizer.json"));
  }
  if (!raw.error.empty()) return Status::Error(StrCat(origin, " ", raw.error));
  if (!root.contains("model") || !root["model"].is_object()) {
    return Status::Error(StrCat(origin, " has no \"model\" object; is this a tokenizer.json?"));
  }
  Tokenizer tok;
  GK_RETURN_IF_ERROR(tok.ParseModel(root["model"], raw, origin));
  GK_RETURN_IF_ERROR(tok.ParseAddedTokens(Field(root, "added_tokens"), origin));
  GK_RETURN_IF_ERROR(tok.ParsePipeline(root, origin));
  // Merges are resolved after the added tokens, which may re-point a piece to another id.
  GK_RETURN_IF_ERROR(tok.ParseMerges(raw, origin));
  tok.FinishLoad();
  return tok;
}

Status Tokenizer::ParseModel(const json& model, RawModel& raw, const std::string& origin) {
  const std::string type = GetString(model, "type", "BPE");
  if (type != "BPE") {
    return Status::Error(StrCat(origin, " model.type is \"", type,
                                "\"; only BPE tokenizers (Gemma, Llama) are supported"));
  }
  if (!GetString(model, "continuing_subword_prefix").empty() ||
      !GetString(model, "end_of_word_suffix").empty()) {
    return Status::Error(StrCat(origin, " model sets continuing_subword_prefix or "
                                        "end_of_word_suffix, which is not supported"));
  }
  if (raw.vocab.empty()) return Status::Error(StrCat(origin, " model.vocab is missing or empty"));
  int64_t max_id = 0;
  for (const auto& [piece, id] : raw.vocab) {
    if (id < 0 || id >= kMaxTokenId) {
      return Status::Error(StrCat(origin, " model.vocab[\"", piece, "\"] = ", id,
                                  " is not an id in [0, ", kMaxTokenId, ")"));
    }
    max_id = std::max(max_id, id);
  }
  pieces_.resize(max_id + 1);
  flags_.assign(pieces_.size(), 0);
  piece_slots_.assign(TableSize(raw.vocab.size()), 0);
  for (auto& [piece, id] : raw.vocab) {
    pieces_[id] = std::move(piece);
    IndexPiece(static_cast<int32_t>(id));
  }
  raw.vocab.clear();
  byte_fallback_ = GetBool(model, "byte_fallback");
  fuse_unk_ = GetBool(model, "fuse_unk");
  ignore_merges_ = GetBool(model, "ignore_merges");
  const std::string unk = GetString(model, "unk_token");
  unk_id_ = unk.empty() ? -1 : FindPiece(unk);
  return Status::Ok();
}

Status Tokenizer::ParseMerges(const RawModel& raw, const std::string& origin) {
  merge_slots_.assign(TableSize(raw.merges.size()), MergeSlot{});
  std::string joined;
  for (size_t rank = 0; rank < raw.merges.size(); ++rank) {
    const auto& [left, right] = raw.merges[rank];
    joined.assign(left).append(right);
    const int32_t l = FindPiece(left), r = FindPiece(right), lr = FindPiece(joined);
    if (l < 0 || r < 0 || lr < 0) {
      return Status::Error(StrCat(origin, " model.merges[", rank, "] (\"", left, "\", \"", right,
                                  "\") uses a piece missing from model.vocab; the file is corrupt"));
    }
    const uint64_t key = (uint64_t(uint32_t(l)) << 32) | uint32_t(r);
    const size_t mask = merge_slots_.size() - 1;
    for (size_t i = HashKey(key) & mask;; i = (i + 1) & mask) {
      if (merge_slots_[i].key == key) break;  // duplicate: the first (best) rank wins
      if (merge_slots_[i].key == ~uint64_t{0}) {
        merge_slots_[i] = {key, static_cast<int32_t>(rank), lr};
        break;
      }
    }
  }
  return Status::Ok();
}

void Tokenizer::IndexPiece(int32_t id) {
  if (2 * (piece_count_ + 1) > piece_slots_.size()) {  // grow, keeping each slot's current id
    std::vector<uint64_t> old = std::move(piece_slots_);
    piece_slots_.assign(TableSize(piece_count_ + 1), 0);
    const size_t mask = piece_slots_.size() - 1;
    for (uint64_t slot : old) {
      if (slot == 0) continue;
      size_t i = (slot >> 32) & mask;
      while (piece_slots_[i] != 0) i = (i + 1) & mask;
      piece_slots_[i] = slot;
    }
  }
  const std::string& piece = pieces_[id];
  const uint64_t h = HashPiece(piece);
  const size_t mask = piece_slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const uint64_t slot = piece_slots_[i];
    if (slot == 0 || ((slot >> 32) == h && pieces_[int32_t(slot & 0xFFFFFFFF) - 1] == piece)) {
      piece_count_ += slot == 0;
      piece_slots_[i] = (h << 32) | uint64_t(id + 1);
      return;
    }
  }
}

int32_t Tokenizer::FindPiece(std::string_view piece) const {
  const uint64_t h = HashPiece(piece);
  const size_t mask = piece_slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const uint64_t slot = piece_slots_[i];
    if (slot == 0) return -1;
    const int32_t id = int32_t(slot & 0xFFFFFFFF) - 1;
    if ((slot >> 32) == h && pieces_[id] == piece) return id;
  }
}

const Tokenizer::MergeSlot* Tokenizer::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  const size_t mask = merge_slots_.size() - 1;
  for (size_t i = HashKey(key) & mask;; i = (i + 1) & mask) {
    if (merge_slots_[i].key == key) return &merge_slots_[i];
    if (merge_slots_[i].key == ~uint64_t{0}) return nullptr;
  }
}

Status Tokenizer::ParseAddedTokens(const json& added, const std::string& origin) {
  trie_.assign(1, TrieNode{});
  std::fill(std::begin(trie_root_), std::end(trie_root_), -1);
  if (added.is_null()) return Status::Ok();
  if (!added.is_array()) return Status::Error(StrCat(origin, " added_tokens is not an array"));
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= kMaxTokenId) {
      return Status::Error(StrCat(origin, " added_tokens[", i, "] = ", t.dump(),
                                  " needs an integer \"id\" >= 0 and a string \"content\""));
    }
    const auto id = static_cast<int32_t>(t["id"].get<int64_t>());
    const std::string content = t["content"].get<std::string>();
    if (id >= static_cast<int32_t>(pieces_.size())) {
      pieces_.resize(id + 1);
      flags_.resize(id + 1, 0);
    }
    pieces_[id] = content;
    IndexPiece(id);
    flags_[id] = kAdded | (GetBool(t, "special") ? kSpecial : 0) | (GetBool(t, "lstrip") ? kLstrip : 0) |
                 (GetBool(t, "rstrip") ? kRstrip : 0);
    if (!content.empty()) AddToTrie(content, id);
  }
  return Status::Ok();
}

Status Tokenizer::ParsePipeline(const json& root, const std::string& origin) {
  GK_ASSIGN_OR_RETURN(normalizer_, ParseNormalizer(root, origin));
  GK_ASSIGN_OR_RETURN(pre_tokenizer_, ParsePreTokenizer(root, origin));
  GK_ASSIGN_OR_RETURN(decoder_, ParseDecoder(root, origin));
  has_decoder_ = root.contains("decoder") && !root["decoder"].is_null();
  return Status::Ok();
}

void Tokenizer::AddToTrie(const std::string& content, int32_t id) {
  int32_t node = trie_root_[static_cast<uint8_t>(content[0])];
  if (node < 0) {
    node = trie_root_[static_cast<uint8_t>(content[0])] = static_cast<int32_t>(trie_.size());
    trie_.emplace_back();
  }
  for (size_t i = 1; i < content.size(); ++i) {
    const auto b = static_cast<uint8_t>(content[i]);
    int32_t next = -1;
    for (const auto& [c, child] : trie_[node].children) {
      if (c == b) next = child;
    }
    if (next < 0) {
      next = static_cast<int32_t>(trie_.size());
      trie_[node].children.emplace_back(b, next);
      trie_.emplace_back();
    }
    node = next;
  }
  trie_[node].token = id;  // a later duplicate wins, like the JSON load order in tokenizers
}

void Tokenizer::FinishLoad() {
  bmp_ids_.assign(0x10000, -1);
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string& piece = pieces_[id];
    if (piece.empty() || FindPiece(piece) != id) continue;
    const Utf8Scan scan = ScanUtf8(piece, 0);
    if (scan.valid && scan.len == static_cast<int>(piece.size()) && scan.cp < 0x10000) {
      bmp_ids_[scan.cp] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = FindPiece(ByteTokenName(static_cast<uint8_t>(b)));
  }
  auto id_of = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (auto id = TokenId(n)) return *id;
    }
    return -1;
  };
  bos_id_ = id_of({"<bos>", "<s>"});
  eos_id_ = id_of({"<eos>", "</s>"});
  pad_id_ = id_of({"<pad>"});
  if (unk_id_ < 0) unk_id_ = id_of({"<unk>"});
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view piece) const {
  const int32_t id = FindPiece(piece);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string& Tokenizer::Piece(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_size() ? pieces_[id] : kEmpty;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && (flags_[id] & kSpecial);
}

bool Tokenizer::IsAdded(int32_t id) const {
  return id >= 0 && id < vocab_size() && (flags_[id] & kAdded);
}

int32_t Tokenizer::MatchAdded(std::string_view text, size_t pos, bool parse_special,
                              size_t* len) const {
  int32_t node = trie_root_[static_cast<uint8_t>(text[pos])];
  int32_t best = -1;
  for (size_t j = pos + 1; node >= 0; ++j) {
    const int32_t tok = trie_[node].token;
    if (tok >= 0 && (parse_special || !(flags_[tok] & kSpecial))) best = tok, *len = j - pos;
    if (j == text.size()) break;
    const auto b = static_cast<uint8_t>(text[j]);
    int32_t next = -1;
    for (const auto& [c, child] : trie_[node].children) {
      if (c == b) next = child;
    }
    node = next;
  }
  return best;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, SpecialTokenText special) const {
  const std::pair<size_t, size_t> all{0, text.size()};
  return EncodeWithSpecialRanges(
      text, special == SpecialTokenText::kParse ? std::span(&all, 1) : std::span<const std::pair<size_t, size_t>>());
}

std::vector<int32_t> Tokenizer::EncodeWithSpecialRanges(
    std::string_view text, std::span<const std::pair<size_t, size_t>> special_ranges) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t range = 0;
  size_t start = 0;  // start of the pending ordinary-text section
  for (size_t i = 0; i < text.size();) {
    while (range < special_ranges.size() && special_ranges[range].second <= i) ++range;
    const bool in_range = range < special_ranges.size() && special_ranges[range].first <= i;
    size_t len = 0;
    // A special token must end inside its range: matching stops at the range's end.
    int32_t tok = in_range ? MatchAdded(text.substr(0, special_ranges[range].second), i, true, &len) : -1;
    if (tok < 0) tok = MatchAdded(text, i, false, &len);
    if (tok < 0) {
      ++i;
      continue;
    }
    size_t end = i;
    if (flags_[tok] & kLstrip) {
      while (end > start && IsAsciiSpace(text[end - 1])) --end;
    }
    EncodeSection(text.substr(start, end - start), start == 0, &out);
    out.push_back(tok);
    i += len;
    if (flags_[tok] & kRstrip) {
      while (i < text.size() && IsAsciiSpace(text[i])) ++i;
    }
    start = i;
  }
  EncodeSection(text.substr(start), start == 0, &out);
  return out;
}

void Tokenizer::EncodeSection(std::string_view section, bool first_section,
                              std::vector<int32_t>* out) const {
  if (section.empty()) return;
  std::string normalized(section);
  for (const NormalizerStep& step : normalizer_) {
    if (step.kind == NormalizerStep::kReplace) {
      ReplaceAll(&normalized, step.pattern, step.content);
    } else if (!normalized.empty()) {
      normalized.insert(0, step.content);
    }
  }
  const size_t before = out->size();
  if (pre_tokenizer_.empty()) {
    EncodeWord(normalized, out);
  } else {
    std::vector<std::string> words{std::move(normalized)};
    for (const PreTokenizerStep& step : pre_tokenizer_) PreTokenize(step, first_section, &words);
    for (const std::string& w : words) EncodeWord(w, out);
  }
  if (fuse_unk_ && unk_id_ >= 0) {  // consecutive unknowns collapse into one <unk>
    auto new_end = std::unique(out->begin() + before, out->end(),
                               [&](int32_t a, int32_t b) { return a == unk_id_ && b == unk_id_; });
    out->erase(new_end, out->end());
  }
}

void Tokenizer::AppendByteFallback(std::string_view symbol, std::vector<int32_t>* out) const {
  bool all = byte_fallback_;
  for (char c : symbol) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
  if (!all) {
    if (unk_id_ >= 0) out->push_back(unk_id_);
    return;
  }
  for (char c : symbol) out->push_back(byte_ids_[static_cast<uint8_t>(c)]);
}

// BPE over one word: a doubly linked list of symbols plus a min-heap of candidate merges keyed
// by (merge rank, position). A popped candidate is stale when either side has changed since it
// was pushed; ids only ever grow into longer pieces, so comparing ids detects that.
void Tokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = FindPiece(word); id >= 0) return out->push_back(id);
  }
  struct Symbol {
    uint32_t start, len;
    int32_t id, prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const Utf8Scan scan = ScanUtf8(word, i);
    const int len = scan.valid ? scan.len : 1;  // invalid bytes stand alone and fall back to <0x..>
    int32_t id = -1;
    if (scan.valid) id = scan.cp < 0x10000 ? bmp_ids_[scan.cp] : FindPiece(word.substr(i, len));
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), id, n - 1, -1});
    if (n > 0) sym[n - 1].next = n;
    i += len;
  }
  struct Candidate {
    int32_t rank, pos, left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    const int32_t j = sym[i].next;
    if (j < 0 || sym[i].id < 0 || sym[j].id < 0) return;
    if (const MergeSlot* m = FindMerge(sym[i].id, sym[j].id)) {
      heap.push({m->rank, i, sym[i].id, sym[j].id, m->merged_id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (left.len == 0 || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = sym[left.next];
    if (right.id != c.right_id) continue;
    left.id = c.merged_id;
    left.len += right.len;
    right.len = 0;  // dead
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id >= 0) {
      out->push_back(sym[i].id);
    } else {
      AppendByteFallback(word.substr(sym[i].start, sym[i].len), out);
    }
  }
}

std::string Tokenizer::DecodeBytes(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || (skip_special && (flags_[id] & kSpecial))) continue;
    tokens.push_back(pieces_[id]);
  }
  if (!has_decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined.append(i ? " " : "").append(tokens[i]);
    return joined;
  }
  for (const DecoderStep& step : decoder_) {
    switch (step.kind) {
      case DecoderStep::kReplace:
        for (std::string& t : tokens) ReplaceAll(&t, step.pattern, step.content);
        break;
      case DecoderStep::kByteFallback: {  // runs of <0xAB> become one raw byte string
        std::vector<std::string> merged;
        bool prev_byte = false;
        for (std::string& t : tokens) {
          const int b = ByteTokenValue(t);
          if (b >= 0 && prev_byte) {
            merged.back().push_back(static_cast<char>(b));
          } else {
            merged.push_back(b >= 0 ? std::string(1, static_cast<char>(b)) : std::move(t));
          }
          prev_byte = b >= 0;
        }
        tokens = std::move(merged);
        break;
      }
      case DecoderStep::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::kStrip:
        for (std::string& t : tokens) {
          const std::string& c = step.content;
          size_t b = 0, e = t.size();
          for (int k = 0; k < step.start && t.compare(b, c.size(), c) == 0 && b < e; ++k) b += c.size();
          for (int k = 0; k < step.stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0;
               ++k) {
            e -= c.size();
          }
          t = t.substr(b, e - b);
        }
        break;
      case DecoderStep::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          ReplaceAll(&tokens[i], step.pattern, " ");
          if (i == 0 && step.strip_first_space && !tokens[i].empty() && tokens[i][0] == ' ') {
            tokens[i].erase(0, 1);
          }
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  const std::string raw = DecodeBytes(ids, skip_special);
  std::string out;
  out.reserve(raw.size());
  AppendValidUtf8(raw, &out);
  return out;
}

std::string StreamingDecoder::Add(int32_t id) {
  if (skip_special_ && tokenizer_->IsSpecial(id)) return "";
  window_.push_back(id);
  const std::string raw = tokenizer_->DecodeBytes(window_);
  const size_t complete = CompleteUtf8Prefix(raw);
  std::string out;
  if (complete > emitted_) AppendValidUtf8(std::string_view(raw).substr(emitted_, complete - emitted_), &out);
  if (complete == raw.size()) {
    // Nothing pending: keep only the last id as context for the next call.
    window_.erase(window_.begin(), window_.end() - 1);
    emitted_ = tokenizer_->DecodeBytes(window_).size();
  } else {
    emitted_ = std::max(emitted_, complete);
  }
  return out;
}

std::string StreamingDecoder::Flush() {
  const std::string raw = tokenizer_->DecodeBytes(window_);
  std::string out;
  if (raw.size() > emitted_) AppendValidUtf8(std::string_view(raw).substr(emitted_), &out);
  window_.clear();
  emitted_ = 0;
  return out;
}

}  // namespace gk
