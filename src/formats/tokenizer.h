// Hugging Face tokenizer.json (BPE with SentencePiece-style byte fallback), as shipped with
// Gemma 2/3/4 checkpoints: encode text to ids, decode ids to text, and decode a stream of ids.
//
// Encode follows the tokenizers pipeline (and transformers.js, our test oracle):
//   1. split the raw text on added tokens (leftmost, longest match first);
//   2. each remaining section: normalizer (Replace, Prepend, Sequence), pre-tokenizer
//      (Split on a string, Metaspace, Sequence; Gemma's has no effect after normalizing), then
//      BPE per word. Gemma has no real pre-tokenizer, so a "word" can be a whole line: BPE runs
//      on a linked list of symbols with a heap of merge candidates, O(n log n);
//   3. pieces missing from the vocab become <0xAB> byte tokens (also for invalid UTF-8 input).
// Decode runs the decoder chain (Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence);
// invalid UTF-8 from byte tokens becomes U+FFFD (one per maximal invalid subpart, like the
// WHATWG TextDecoder).
//
// Thread safety: a loaded Tokenizer is immutable; any thread may call its const methods.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/result.h"

namespace gk {

// Whether text that spells a special added token (e.g. "<bos>") becomes that token.
// kAsText is for user content inside a chat template: it must never inject control tokens.
enum class SpecialTokenText { kParse, kAsText };

class Tokenizer {
 public:
  // Move-only: the tables are tens of megabytes.
  Tokenizer(Tokenizer&&) = default;
  Tokenizer& operator=(Tokenizer&&) = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads and parses a tokenizer.json file.
  static Result<Tokenizer> Load(const std::string& path);
  // Parses tokenizer.json text; `origin` names it in error messages.
  static Result<Tokenizer> FromJson(std::string_view json_text,
                                    const std::string& origin = "tokenizer.json");

  // Text to ids. Adds no BOS/EOS (the chat template or caller does that explicitly).
  std::vector<int32_t> Encode(std::string_view text,
                              SpecialTokenText special = SpecialTokenText::kParse) const;
  // Text in which special added tokens are recognised only inside `special_ranges` (sorted,
  // non-overlapping [begin, end) byte offsets) and only when they lie wholly inside one: a
  // rendered chat template whose own markers are control tokens while message text that spells
  // them stays text. Sections between control tokens are encoded whole, as Encode does.
  std::vector<int32_t> EncodeWithSpecialRanges(std::string_view text,
                                               std::span<const std::pair<size_t, size_t>> special_ranges) const;
  // Ids to text. Unknown ids decode to nothing.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Decoded bytes before UTF-8 repair: byte tokens may leave partial characters at the end.
  std::string DecodeBytes(std::span<const int32_t> ids, bool skip_special = false) const;

  std::optional<int32_t> TokenId(std::string_view piece) const;
  const std::string& Piece(int32_t id) const;  // "" for ids with no piece
  bool IsSpecial(int32_t id) const;            // an added token marked "special"
  bool IsAdded(int32_t id) const;              // any added token
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }  // max id + 1

  // -1 when the tokenizer has no such token. Looked up by name: <bos>, <eos>, <pad>.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }

  // Pipeline steps read from the JSON (public so the .cc helpers can name them).
  struct NormalizerStep {
    enum Kind { kReplace, kPrepend } kind;
    std::string pattern, content;
  };
  struct PreTokenizerStep {
    enum Kind { kSplit, kMetaspace } kind;
    std::string pattern;   // kSplit: the delimiter; kMetaspace: the replacement
    std::string behavior;  // kSplit: removed|isolated|merged_with_previous|merged_with_next|contiguous
    bool invert = false;   // kSplit
    std::string prepend_scheme = "always";  // kMetaspace: always|first|never
    bool split = true;     // kMetaspace
  };
  struct DecoderStep {
    enum Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern, content;
    int start = 0, stop = 0;  // kStrip
    bool strip_first_space = false;  // kMetaspace
  };

 private:
  struct MergeSlot {  // open-addressing table entry; key = left id << 32 | right id
    uint64_t key = ~uint64_t{0};  // empty
    int32_t rank = 0, merged_id = 0;
  };
  struct TrieNode {
    int32_t token = -1;  // added token ending here
    std::vector<std::pair<uint8_t, int32_t>> children;
  };
  struct RawModel;  // vocab and merges captured while parsing, without a JSON DOM
  static Result<nlohmann::json> ParseCapturingModel(std::string_view text, RawModel& raw,
                                                    const std::string& origin);
  // FromJson without the GuardedParse around it (util/guarded_parse.h).
  static Result<Tokenizer> FromJsonUnguarded(std::string_view json_text, const std::string& origin);

  Tokenizer() = default;
  Status ParseModel(const nlohmann::json& model, RawModel& raw, const std::string& origin);
  Status ParseMerges(const RawModel& raw, const std::string& origin);
  Status ParseAddedTokens(const nlohmann::json& added, const std::string& origin);
  Status ParsePipeline(const nlohmann::json& root, const std::string& origin);
  void AddToTrie(const std::string& content, int32_t id);
  void FinishLoad();
  void IndexPiece(int32_t id);                 // (re)points pieces_[id]'s text at id
  int32_t FindPiece(std::string_view piece) const;  // -1 when absent
  const MergeSlot* FindMerge(int32_t left, int32_t right) const;

  // Longest added token starting at text[pos]; returns its id and sets *len.
  int32_t MatchAdded(std::string_view text, size_t pos, bool parse_special, size_t* len) const;
  void EncodeSection(std::string_view section, bool first_section, std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  void AppendByteFallback(std::string_view symbol, std::vector<int32_t>* out) const;

  std::vector<std::string> pieces_;  // id -> piece (added tokens override the vocab)
  std::vector<uint8_t> flags_;       // id -> kAdded | kSpecial | kLstrip | kRstrip
  // Flat hash tables: loading resolves ~1.5M lookups, so node-based maps were the bottleneck.
  std::vector<uint64_t> piece_slots_;   // hash << 32 | (id + 1); 0 = empty
  size_t piece_count_ = 0;              // used slots
  std::vector<MergeSlot> merge_slots_;
  std::vector<int32_t> bmp_ids_;     // code point < 0x10000 -> id of that one-char piece, or -1
  int32_t byte_ids_[256];            // byte -> id of <0xAB>, or -1
  std::vector<TrieNode> trie_;       // added tokens; node 0 is the root
  int32_t trie_root_[256];           // root children, indexed directly (the hot path)

  std::vector<NormalizerStep> normalizer_;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  std::vector<DecoderStep> decoder_;
  bool has_decoder_ = false;  // without one, pieces are joined with spaces (as tokenizers does)
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, unk_id_ = -1;
};

// Turns a stream of ids into text, returning only complete UTF-8: a character split over
// several byte-fallback tokens comes out once its last byte arrives.
// Not thread-safe; one per generation stream. The tokenizer must outlive it.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // The new complete text that `id` adds (may be empty while a character is incomplete).
  std::string Add(int32_t id);
  // Ends the stream: returns a held-back incomplete character as U+FFFD, then resets.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  // Ids since the last complete point, led by one already-emitted id of context so that
  // decoders which treat the first token specially (Strip, Metaspace) see the right position.
  std::vector<int32_t> window_;
  size_t emitted_ = 0;  // bytes of DecodeBytes(window_) already returned
};

// UTF-8 helpers shared by the decoder paths.
// Appends `bytes` to *out, replacing each maximal invalid subpart with U+FFFD.
void AppendValidUtf8(std::string_view bytes, std::string* out);
// Length of the prefix of `bytes` that does not end inside an incomplete (but so far valid)
// multi-byte character.
size_t CompleteUtf8Prefix(std::string_view bytes);

}  // namespace gk
