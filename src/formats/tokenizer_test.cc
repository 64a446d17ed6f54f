#include "formats/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gemma4_tokens.h"
#include "util/atomic_file.h"

namespace gk {
namespace {

using json = nlohmann::json;
const std::string kMeta = "\xE2\x96\x81";  // ▁

// A small Gemma-shaped tokenizer.json: byte tokens, a few letters and merges, added tokens.
json SmallTokenizerJson() {
  json vocab = json::object();
  int id = 0;
  for (const char* p : {"<pad>", "<eos>", "<bos>", "<unk>"}) vocab[p] = id++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (std::string p : {kMeta, std::string("a"), std::string("b"), std::string("h"),
                        std::string("e"), std::string("l"), std::string("o"), std::string("\n"),
                        std::string("he"), std::string("ll"), std::string("hell"),
                        std::string("hello"), kMeta + "hello", std::string("aa"),
                        std::string("ab"), kMeta + kMeta}) {
    vocab[p] = id++;
  }
  json merges = json::array({"l l", "h e", "he ll", json::array({"hell", "o"}),
                             json::array({kMeta, "hello"}), "a b", "a a",
                             json::array({kMeta, kMeta})});
  json added = json::array();
  auto add = [&](int tid, const std::string& content, bool special) {
    added.push_back({{"id", tid}, {"content", content}, {"special", special}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"single_word", false}});
  };
  for (const char* p : {"<pad>", "<eos>", "<bos>", "<unk>"}) add(vocab[p].get<int>(), p, true);
  add(vocab["\n"].get<int>(), "\n", false);
  add(1000, "\n\n", false);           // past the vocab: vocab_size() must cover it
  add(1001, "<start_of_turn>", true);
  add(1002, "<start", false);         // a prefix of a longer added token
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"},
        {"invert", false}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"},
                                   {"pattern", {{"String", kMeta}}},
                                   {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
        {"vocab", vocab}, {"merges", merges}}},
  };
}

Tokenizer SmallTokenizer() {
  auto tok = Tokenizer::FromJson(SmallTokenizerJson().dump(), "small.json");
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

std::vector<std::string> Pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.Piece(id));
  return out;
}

using Strs = std::vector<std::string>;

TEST(TokenizerTest, LoadsVocabAddedTokensAndSpecialIds) {
  const Tokenizer tok = SmallTokenizer();
  EXPECT_EQ(tok.vocab_size(), 1003);  // the added token 1002 is past the model vocab
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 3);
  EXPECT_EQ(tok.TokenId("<start_of_turn>"), 1001);
  EXPECT_EQ(tok.TokenId("hello"), tok.TokenId("hell").value() + 1);
  EXPECT_FALSE(tok.TokenId("nope").has_value());
  EXPECT_EQ(tok.Piece(1001), "<start_of_turn>");
  EXPECT_EQ(tok.Piece(999), "");    // a gap in the ids
  EXPECT_EQ(tok.Piece(-1), "");
  EXPECT_TRUE(tok.IsSpecial(2));
  EXPECT_TRUE(tok.IsSpecial(1001));
  EXPECT_FALSE(tok.IsSpecial(1000));
  EXPECT_TRUE(tok.IsAdded(1000));
  EXPECT_FALSE(tok.IsSpecial(tok.TokenId("a").value()));
}

TEST(TokenizerTest, BpeAppliesMergesInRankOrder) {
  const Tokenizer tok = SmallTokenizer();
  EXPECT_EQ(Pieces(tok, tok.Encode("hello")), Strs({"hello"}));
  EXPECT_EQ(Pieces(tok, tok.Encode(" hello")), Strs({kMeta + "hello"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("hello hello")), Strs({"hello", kMeta + "hello"}));
  // "a b" outranks "a a": aab -> a + ab, not aa + b.
  EXPECT_EQ(Pieces(tok, tok.Encode("aab")), Strs({"a", "ab"}));
  // Equal ranks merge leftmost first.
  EXPECT_EQ(Pieces(tok, tok.Encode("aaa")), Strs({"aa", "a"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("   ")), Strs({kMeta + kMeta, kMeta}));
  EXPECT_TRUE(tok.Encode("").empty());
}

TEST(TokenizerTest, UnknownCharactersFallBackToBytes) {
  const Tokenizer tok = SmallTokenizer();
  EXPECT_EQ(Pieces(tok, tok.Encode("h\xC3\xA9")), Strs({"h", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(tok.Decode(tok.Encode("h\xC3\xA9 \xF0\x9F\x98\x80")), "h\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(TokenizerTest, InvalidUtf8BecomesByteTokensAndDecodesToReplacementChars) {
  const Tokenizer tok = SmallTokenizer();
  const std::string bad = "a\xFF\xC3(\xE2\x82";  // stray byte, truncated 2- and 3-byte chars
  const std::vector<int32_t> ids = tok.Encode(bad);
  EXPECT_EQ(Pieces(tok, ids), Strs({"a", "<0xFF>", "<0xC3>", "<0x28>", "<0xE2>", "<0x82>"}));
  // One U+FFFD per maximal invalid subpart, as the WHATWG TextDecoder does.
  EXPECT_EQ(tok.Decode(ids), "a\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD");
}

TEST(TokenizerTest, AddedTokensSplitTextLongestFirst) {
  const Tokenizer tok = SmallTokenizer();
  const int32_t nl = tok.TokenId("\n").value();
  EXPECT_EQ(tok.Encode("a\n\n\nb"),
            (std::vector<int32_t>{tok.TokenId("a").value(), 1000, nl, tok.TokenId("b").value()}));
  EXPECT_EQ(tok.Encode("<start_of_turn>hello<bos>"),
            (std::vector<int32_t>{1001, tok.TokenId("hello").value(), 2}));
  EXPECT_EQ(tok.Encode("<starthello"), (std::vector<int32_t>{1002, tok.TokenId("hello").value()}));
}

TEST(TokenizerTest, SpecialTokenTextCanBeKeptAsPlainText) {
  const Tokenizer tok = SmallTokenizer();
  const std::vector<int32_t> ids = tok.Encode("<start_of_turn>\n", SpecialTokenText::kAsText);
  // Special tokens are not matched, but a non-special added prefix and "\n" still are.
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1002);
  EXPECT_EQ(ids.back(), tok.TokenId("\n").value());
  for (int32_t id : ids) EXPECT_FALSE(tok.IsSpecial(id)) << tok.Piece(id);
  EXPECT_EQ(tok.Decode(ids), "<start_of_turn>\n");
}

TEST(TokenizerTest, DecodeReplacesMetaspaceAndCanSkipSpecialTokens) {
  const Tokenizer tok = SmallTokenizer();
  std::vector<int32_t> ids = {2};
  for (int32_t id : tok.Encode("hello hello")) ids.push_back(id);
  ids.push_back(1);
  EXPECT_EQ(tok.Decode(ids), "<bos>hello hello<eos>");
  EXPECT_EQ(tok.Decode(ids, /*skip_special=*/true), "hello hello");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{-5, 999, 5000}), "");  // unknown ids vanish
}

TEST(TokenizerTest, StreamingDecoderEmitsOnlyCompleteCharacters) {
  const Tokenizer tok = SmallTokenizer();
  const std::string text = "he\xC3\xA9 \xF0\x9F\x98\x80!\nhello";
  const std::vector<int32_t> ids = tok.Encode(text);
  StreamingDecoder stream(tok);
  std::string joined;
  for (int32_t id : ids) {
    const std::string part = stream.Add(id);
    std::string valid;
    AppendValidUtf8(part, &valid);
    EXPECT_EQ(valid, part) << "emitted a partial character for " << tok.Piece(id);
    joined += part;
  }
  joined += stream.Flush();
  EXPECT_EQ(joined, tok.Decode(ids));
  EXPECT_EQ(joined, text);

  // The four bytes of 😀 come out together with the last one.
  StreamingDecoder s2(tok);
  std::vector<std::string> parts;
  for (int32_t id : tok.Encode("\xF0\x9F\x98\x80")) parts.push_back(s2.Add(id));
  EXPECT_EQ(parts, Strs({"", "", "", "\xF0\x9F\x98\x80"}));

  // A dangling partial character is flushed as U+FFFD.
  StreamingDecoder s3(tok);
  EXPECT_EQ(s3.Add(tok.TokenId("<0xF0>").value()), "");
  EXPECT_EQ(s3.Flush(), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, StreamingDecoderSkipsSpecialTokensWhenAsked) {
  const Tokenizer tok = SmallTokenizer();
  StreamingDecoder stream(tok, /*skip_special=*/true);
  EXPECT_EQ(stream.Add(2), "");
  EXPECT_EQ(stream.Add(tok.TokenId("hello").value()), "hello");
  EXPECT_EQ(stream.Add(1), "");
}

TEST(TokenizerTest, Utf8Helpers) {
  EXPECT_EQ(CompleteUtf8Prefix("ab"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);      // invalid, not incomplete
  EXPECT_EQ(CompleteUtf8Prefix("a\xE0\x80"), 3u);  // E0 80 can never complete
  std::string out;
  AppendValidUtf8("x\xED\xA0\x80y", &out);  // a UTF-16 surrogate encoded in UTF-8 is invalid
  EXPECT_EQ(out, "x\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDy");
}

TEST(TokenizerTest, LongWordEncodesInNearLinearTime) {
  const Tokenizer tok = SmallTokenizer();
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "ab";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.Encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(ids.size(), 200000u);
  EXPECT_EQ(ids[123], tok.TokenId("ab").value());
  EXPECT_LT(seconds, 5.0) << "400k-character word; quadratic BPE would take minutes";
}

TEST(TokenizerTest, ReportsMalformedFiles) {
  EXPECT_NE(Tokenizer::FromJson("{not json", "t.json").message().find("t.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(Tokenizer::FromJson("{}", "t.json").message().find("no \"model\""), std::string::npos);

  json j = SmallTokenizerJson();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(Tokenizer::FromJson(j.dump(), "t.json").message().find("model.type is \"Unigram\""),
            std::string::npos);

  j = SmallTokenizerJson();
  j["model"]["merges"].push_back("x y");
  EXPECT_NE(Tokenizer::FromJson(j.dump(), "t.json").message().find("model.merges[8]"),
            std::string::npos);

  j = SmallTokenizerJson();
  j["model"]["merges"].push_back("toomany spaces here");
  EXPECT_NE(Tokenizer::FromJson(j.dump(), "t.json").message().find("one space"), std::string::npos);

  j = SmallTokenizerJson();
  j["model"]["vocab"]["zz"] = "seven";
  EXPECT_NE(Tokenizer::FromJson(j.dump(), "t.json").message().find("model.vocab[\"zz\"]"),
            std::string::npos);

  j = SmallTokenizerJson();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(Tokenizer::FromJson(j.dump(), "t.json").message().find("normalizer NFKC"),
            std::string::npos);

  EXPECT_NE(Tokenizer::Load("/nonexistent/tokenizer.json").message().find("/nonexistent"),
            std::string::npos);
}

TEST(TokenizerTest, MetaspacePreTokenizerAndStripDecoder) {
  // Llama/Gemma-1 style: Metaspace pre-tokenizer, Metaspace decoder.
  json j = SmallTokenizerJson();
  j.erase("normalizer");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"},
                        {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}};
  auto tok = Tokenizer::FromJson(j.dump(), "t.json");
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(Pieces(*tok, tok->Encode("hello hello")), Strs({kMeta + "hello", kMeta + "hello"}));
  EXPECT_EQ(tok->Decode(tok->Encode("hello hello")), "hello hello");

  // Gemma-1 style: normalizer Prepend + Replace, decoder ending in Strip.
  j = SmallTokenizerJson();
  j["pre_tokenizer"] = nullptr;
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      json::array({{{"type", "Prepend"}, {"prepend", kMeta}},
                                   {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                                    {"content", kMeta}}})}};
  j["decoder"]["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tok = Tokenizer::FromJson(j.dump(), "t.json");
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(Pieces(*tok, tok->Encode("hello")), Strs({kMeta + "hello"}));
  EXPECT_EQ(tok->Decode(tok->Encode("hello hello")), "hello hello");
  StreamingDecoder stream(*tok);
  std::string joined;
  for (int32_t id : tok->Encode("hello hello")) joined += stream.Add(id);
  EXPECT_EQ(joined, "hello hello");
}

// ---- Reference test: the real Gemma 3 tokenizer.json against transformers.js (npm) ----

std::string SourcePath(const std::string& rel) { return std::string(GK_SOURCE_DIR) + "/" + rel; }

bool HaveNode() { return std::system("node --version > /dev/null 2>&1") == 0; }

// Runs tests/tokenizer/reference_encode.js and returns one parsed JSON line per corpus string.
std::vector<json> RunReference() {
  const std::string cmd = "node '" + SourcePath("tests/tokenizer/reference_encode.js") + "' '" +
                          SourcePath("tests/tokenizer/corpus.json") + "' '" +
                          SourcePath("build/npm") + "'";
  std::vector<json> lines;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return lines;
  std::string out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  if (pclose(pipe) != 0) return {};
  size_t pos = 0;
  for (size_t nl; (nl = out.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    lines.push_back(json::parse(out.substr(pos, nl - pos)));
  }
  return lines;
}

std::string ReplaceMeta(std::string s) {
  for (size_t p; (p = s.find(kMeta)) != std::string::npos;) s.replace(p, kMeta.size(), " ");
  return s;
}

TEST(TokenizerReferenceTest, Gemma3MatchesTransformersJsOnCorpus) {
  const std::string path = SourcePath("build/tokenizer/gemma3/tokenizer.json");
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " missing; run scripts/fetch_tokenizer.sh";
  }
  if (!HaveNode() || !std::filesystem::exists(SourcePath("build/npm/node_modules"))) {
    GTEST_SKIP() << "node or build/npm missing; run scripts/install_deps.sh";
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::Load(path);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->vocab_size(), 262145);  // 262144 pieces + <image_soft_token>
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->TokenId("<start_of_turn>"), 105);

  std::ifstream f(SourcePath("tests/tokenizer/corpus.json"));
  const json corpus = json::parse(f);
  const std::vector<json> reference = RunReference();
  ASSERT_EQ(reference.size(), corpus.size()) << "reference_encode.js failed; run it by hand";

  size_t chars = 0, mismatches = 0;
  double encode_s = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    const auto e0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok->Encode(text);
    encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    chars += text.size();
    const auto want = reference[i]["ids"].get<std::vector<int32_t>>();
    if (ids != want) ++mismatches;
    EXPECT_EQ(ids, want) << "corpus[" << i << "] = " << json(text.substr(0, 200)).dump();
    // Round trip: the decoder maps every "▁" back to a space, so literal "▁" cannot survive.
    EXPECT_EQ(tok->Decode(ids), ReplaceMeta(text)) << "corpus[" << i << "]";
    EXPECT_EQ(tok->Decode(ids), reference[i]["decoded"].get<std::string>()) << "corpus[" << i << "]";
    StreamingDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Add(id);
    streamed += stream.Flush();
    EXPECT_EQ(streamed, tok->Decode(ids)) << "corpus[" << i << "] streamed";
  }
  std::printf("[ tokenizer ] load %.3f s; encode %zu bytes in %.3f s (%.1f MB/s); %zu mismatches\n",
              std::chrono::duration<double>(t1 - t0).count(), chars, encode_s,
              chars / encode_s / 1e6, mismatches);
}

// ---- Gemma 3 -> Gemma 4 relabelling (formats/gemma4_tokens.h) ----

// A sparse Gemma 3-shaped file: every relabelled slot, the last id, and <image_soft_token>.
json SparseGemma3Json() {
  json vocab = {{"<pad>", 0}, {"<eos>", 1}, {"<bos>", 2}, {"<unk>", 3}, {"a", 7}, {"<unused6241>", 262143}};
  json added = json::array();
  for (const Gemma4ControlToken& t : Gemma4ControlTokens()) {
    vocab[std::string(t.gemma3_name)] = t.id;
    added.push_back({{"id", t.id}, {"content", t.gemma3_name}, {"special", t.id == 105 || t.id == 106},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"single_word", false}});
  }
  added.push_back({{"id", 262144}, {"content", "<image_soft_token>"}, {"special", true}});
  return {{"version", "1.0"}, {"added_tokens", added}, {"normalizer", nullptr},
          {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab},
                     {"merges", json::array()}}}};
}

TEST(TokenizerGemma4RenameTest, RelabelsSlotsMarksThemSpecialAndDropsImageSoftToken) {
  auto renamed = RenameToGemma4Tokens(SparseGemma3Json().dump());
  ASSERT_TRUE(renamed.ok()) << renamed.message();
  auto tok = Tokenizer::FromJson(*renamed);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->vocab_size(), kGemma4VocabSize);
  for (const Gemma4ControlToken& t : Gemma4ControlTokens()) {
    EXPECT_EQ(tok->TokenId(t.gemma4_name), t.id) << t.gemma4_name;
    EXPECT_FALSE(tok->TokenId(t.gemma3_name).has_value()) << t.gemma3_name;
    EXPECT_TRUE(tok->IsSpecial(t.id)) << t.gemma4_name;
  }
  EXPECT_EQ(tok->TokenId("<|\"|>"), 52);
  EXPECT_FALSE(tok->TokenId("<image_soft_token>").has_value());
  EXPECT_EQ(tok->TokenId("a"), 7);
  // Key order survives (this input came from a sorted json, so added_tokens leads), and
  // renaming again changes nothing.
  EXPECT_EQ(renamed->rfind("{\"added_tokens\"", 0), 0u);
  auto again = RenameToGemma4Tokens(*renamed);
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(*again, *renamed);
}

TEST(TokenizerGemma4RenameTest, RejectsFilesThatAreNotGemma3) {
  json j = SparseGemma3Json();
  j["model"]["vocab"].erase("<start_of_turn>");
  j["model"]["vocab"]["<something_else>"] = 105;
  auto r = RenameToGemma4Tokens(j.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("id 105 is \"<something_else>\""), std::string::npos) << r.message();
  EXPECT_FALSE(RenameToGemma4Tokens("[1, 2]").ok());
}

TEST(TokenizerGemma4RenameTest, ConfigGetsGemma4NamesAndTemplate) {
  json c = {{"add_bos_token", true}, {"eos_token", "<end_of_turn>"}, {"boi_token", "<start_of_image>"},
            {"eoi_token", "<end_of_image>"}, {"image_token", "<image_soft_token>"}, {"bos_token", "<bos>"},
            {"extra_special_tokens", {{"image_token", "<image_soft_token>"}}},
            {"chat_template", "{{ '<start_of_turn>' }}"},
            {"added_tokens_decoder",
             {{"105", {{"content", "<start_of_turn>"}, {"special", true}}},
              {"100", {{"content", "<unused94>"}, {"special", false}}},
              {"262144", {{"content", "<image_soft_token>"}, {"special", true}}}}}};
  auto out = RenameToGemma4TokenizerConfig(c.dump());
  ASSERT_TRUE(out.ok()) << out.message();
  const json r = json::parse(*out);
  EXPECT_EQ(r["eos_token"], "<turn|>");
  EXPECT_EQ(r["boi_token"], "<|image>");
  EXPECT_EQ(r["eoi_token"], "<image|>");
  EXPECT_EQ(r["image_token"], "<|image|>");
  EXPECT_EQ(r["extra_special_tokens"]["image_token"], "<|image|>");
  EXPECT_EQ(r["bos_token"], "<bos>");
  EXPECT_EQ(r["add_bos_token"], false);
  EXPECT_EQ(r["added_tokens_decoder"]["105"]["content"], "<|turn>");
  EXPECT_EQ(r["added_tokens_decoder"]["100"]["content"], "<|channel>");
  EXPECT_EQ(r["added_tokens_decoder"]["100"]["special"], true);
  EXPECT_EQ(r["added_tokens_decoder"]["258884"]["content"], "<|video|>");
  EXPECT_FALSE(r["added_tokens_decoder"].contains("262144"));
  EXPECT_NE(r["chat_template"].get<std::string>().find("<|channel>thought"), std::string::npos);
}

TEST(TokenizerGemma4RenameTest, RealGemma3FileKeepsTextIds) {
  const std::string path = SourcePath("build/tokenizer/gemma3/tokenizer.json");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing; run scripts/fetch_tokenizer.sh";
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.message();
  const auto t0 = std::chrono::steady_clock::now();
  auto renamed = RenameToGemma4Tokens(*text);
  const double rename_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(renamed.ok()) << renamed.message();
  auto g3 = Tokenizer::FromJson(*text);
  auto g4 = Tokenizer::FromJson(*renamed);
  ASSERT_TRUE(g3.ok() && g4.ok()) << g3.message() << g4.message();
  EXPECT_EQ(g4->vocab_size(), kGemma4VocabSize);
  EXPECT_EQ(renamed->rfind("{\"version\"", 0), 0u);  // the file's own key order is kept
  EXPECT_EQ(g4->TokenId("<|turn>"), 105);
  EXPECT_EQ(g4->TokenId("<|image|>"), 258880);
  for (const char* s : {"Hello, world!\n\nmodule top(input clk);", "  indented\tcode <table>", "日本語 😀 𪚥"}) {
    EXPECT_EQ(g4->Encode(s), g3->Encode(s)) << s;
  }
  EXPECT_EQ(g4->Encode("<|turn>"), std::vector<int32_t>{105});
  EXPECT_NE(g3->Encode("<|turn>"), std::vector<int32_t>{105});
  std::printf("[ tokenizer ] RenameToGemma4Tokens on the real file: %.3f s\n", rename_s);
}

// tokenizer.json comes with downloaded checkpoints: a number too large for a double or nesting
// a million deep is one error line, not an exception.
TEST(TokenizerTest, HostileFilesAreOneLineErrors) {
  json j = SmallTokenizerJson();
  std::string text = j.dump();
  text.replace(text.find("\"<pad>\":0"), 9, "\"<pad>\":1e999");
  auto t = Tokenizer::FromJson(text, "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("t.json: not valid JSON: number overflow parsing '1e999'"), std::string::npos)
      << t.message();
  const std::string deep = "{\"model\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  t = Tokenizer::FromJson(deep, "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("nesting deeper than"), std::string::npos) << t.message();
  EXPECT_EQ(t.message().find('\n'), std::string::npos);
}

// An added_tokens_decoder entry that is not an object made nlohmann's value() throw.
TEST(TokenizerGemma4RenameTest, MalformedFilesAreErrors) {
  auto c = RenameToGemma4TokenizerConfig(R"({"added_tokens_decoder": {"105": 5}})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("tokenizer_config.json: "), std::string::npos) << c.message();
  EXPECT_FALSE(RenameToGemma4TokenizerConfig(R"({"x": 1e999})").ok());
  EXPECT_FALSE(RenameToGemma4Tokens(R"({"model": {"vocab": {"a": 1e999}}})").ok());
}

}  // namespace
}  // namespace gk
