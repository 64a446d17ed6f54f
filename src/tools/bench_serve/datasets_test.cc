#include "tools/bench_serve/datasets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::bench {
namespace {

using json = nlohmann::json;
const std::string kMeta = "\xE2\x96\x81";  // ▁

// A small Gemma-shaped tokenizer: specials <pad> <eos> [<bos>] <unk> <start_of_turn>, a
// non-special added token, byte fallback, U+FFFD as one piece (as in Gemma, so a lone invalid
// byte re-encodes to one token), a few merges, and the ordinary pieces "<" "b" "o" "s" ">" at
// consecutive ids, so a run of consecutive ids decodes to text that spells "<bos>".
Tokenizer SmallTokenizer(bool with_bos = true) {
  json vocab = json::object(), added = json::array();
  int id = 0;
  auto add_special = [&](const std::string& piece, bool special) {
    vocab[piece] = id;
    added.push_back({{"id", id++}, {"content", piece}, {"special", special}});
  };
  add_special("<pad>", true);
  add_special("<eos>", true);
  if (with_bos) add_special("<bos>", true);
  add_special("<unk>", true);
  add_special("<start_of_turn>", true);
  add_special("<unused0>", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const std::string& p : {kMeta, std::string("a"), std::string("c"), std::string("\xEF\xBF\xBD"),
                               std::string("ab"), kMeta + "a", std::string("abc"), std::string("<"), std::string("b"),
                               std::string("o"), std::string("s"), std::string(">")}) {
    vocab[p] = id++;
  }
  const json merges = json::array({"a b", json::array({kMeta, "a"}), "ab c"});
  const json j = {
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", merges}}},
  };
  auto tok = Tokenizer::FromJson(j.dump(), "bench_small.json");
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

std::string RealTokenizerPath() { return std::string(GK_SOURCE_DIR) + "/build/tokenizer/gemma3/tokenizer.json"; }

size_t CommonIdPrefix(const Tokenizer& tok, const std::vector<SampleRequest>& reqs) {
  const std::vector<int32_t> first = tok.Encode(reqs[0].prompt);
  size_t common = first.size();
  for (const SampleRequest& r : reqs) {
    const std::vector<int32_t> ids = tok.Encode(r.prompt);
    size_t k = 0;
    while (k < common && k < ids.size() && ids[k] == first[k]) ++k;
    common = k;
  }
  return common;
}

// What is guaranteed whatever the tokenizer does: prompt_len is what the server will count,
// i.e. the prompt's own encoding (special-token text parsed, as servers do) plus <bos>.
void ExpectPromptLensAreServerCounts(const Tokenizer& tok, const std::vector<SampleRequest>& reqs) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(int(tok.Encode(reqs[i].prompt).size()) + NumSpecialTokensToAdd(tok), reqs[i].prompt_len) << i;
  }
}

TEST(BenchDatasetsTest, BosIsTheOneAddedToken) {
  EXPECT_EQ(NumSpecialTokensToAdd(SmallTokenizer(true)), 1);
  EXPECT_EQ(NumSpecialTokensToAdd(SmallTokenizer(false)), 0);
}

RandomDatasetOptions Options(int num_prompts, int input_len, int output_len, uint64_t seed) {
  RandomDatasetOptions o;
  o.num_prompts = num_prompts;
  o.input_len = input_len;
  o.output_len = output_len;
  o.seed = seed;
  return o;
}

TEST(BenchDatasetsTest, RandomPromptsHaveExactlyTheAskedLength) {
  const Tokenizer tok = SmallTokenizer();
  auto reqs = SampleRandom(Options(60, 33, 7, 1), tok);
  ASSERT_TRUE(reqs.ok()) << reqs.message();
  ASSERT_EQ(reqs->size(), 60u);
  ExpectPromptLensAreServerCounts(tok, *reqs);
  for (const SampleRequest& r : *reqs) {
    EXPECT_EQ(r.prompt_len, 33);  // 32 generated + <bos>: the fix-up loop converged
    EXPECT_EQ(tok.Encode(r.prompt).size(), 32u);
    EXPECT_EQ(r.expected_output_len, 7);
  }
  // Without <bos> nothing is subtracted: all 33 tokens are generated.
  const Tokenizer no_bos = SmallTokenizer(false);
  auto plain = SampleRandom(Options(10, 33, 7, 1), no_bos);
  ASSERT_TRUE(plain.ok()) << plain.message();
  for (const SampleRequest& r : *plain) {
    EXPECT_EQ(r.prompt_len, 33);
    EXPECT_EQ(no_bos.Encode(r.prompt).size(), 33u);
  }
}

TEST(BenchDatasetsTest, RangeRatioSpreadsLengthsOverTheInclusiveRange) {
  const Tokenizer tok = SmallTokenizer();
  RandomDatasetOptions o = Options(300, 41, 10, 5);  // 40 generated tokens
  o.range_ratio = 0.5;
  auto reqs = SampleRandom(o, tok);
  ASSERT_TRUE(reqs.ok()) << reqs.message();
  ExpectPromptLensAreServerCounts(tok, *reqs);
  int in_min = 1 << 30, in_max = 0, out_min = 1 << 30, out_max = 0;
  for (const SampleRequest& r : *reqs) {
    in_min = std::min(in_min, r.prompt_len);
    in_max = std::max(in_max, r.prompt_len);
    out_min = std::min(out_min, r.expected_output_len);
    out_max = std::max(out_max, r.expected_output_len);
  }
  // [floor(40 * 0.5), ceil(40 * 1.5)] + <bos> and [5, 15]; 300 draws reach both ends.
  EXPECT_EQ(in_min, 21);
  EXPECT_EQ(in_max, 61);
  EXPECT_EQ(out_min, 5);
  EXPECT_EQ(out_max, 15);
}

TEST(BenchDatasetsTest, OutputLengthIsAtLeastOne) {
  RandomDatasetOptions o = Options(50, 21, 1, 2);
  o.range_ratio = 0.9;  // floor(1 * 0.1) = 0 is raised to 1
  auto reqs = SampleRandom(o, SmallTokenizer());
  ASSERT_TRUE(reqs.ok()) << reqs.message();
  for (const SampleRequest& r : *reqs) EXPECT_TRUE(r.expected_output_len == 1 || r.expected_output_len == 2);
}

TEST(BenchDatasetsTest, PromptsThatSpellSpecialTokensCountThemAsTheServerDoes) {
  // Runs of consecutive ids pass over "<" "b" "o" "s" ">": the text then holds "<bos>", which a
  // server parses as one token; prompt_len must count it the same way.
  const Tokenizer tok = SmallTokenizer();
  auto reqs = SampleRandom(Options(80, 60, 4, 3), tok);
  ASSERT_TRUE(reqs.ok()) << reqs.message();
  ExpectPromptLensAreServerCounts(tok, *reqs);
  int spelled = 0;
  for (const SampleRequest& r : *reqs) {
    if (r.prompt.find("<bos>") == std::string::npos) continue;
    ++spelled;
    const std::vector<int32_t> ids = tok.Encode(r.prompt);
    EXPECT_NE(std::find(ids.begin(), ids.end(), tok.bos_id()), ids.end());
    EXPECT_EQ(r.prompt_len, 60);
    // Counted as plain text, "<bos>" would be 5 tokens instead of 1.
    EXPECT_GT(tok.Encode(r.prompt, SpecialTokenText::kAsText).size(), ids.size());
  }
  EXPECT_GT(spelled, 0) << "no prompt crossed the <bos> spelling; pick another seed";
}

TEST(BenchDatasetsTest, SharedPrefixIsTheSameInEveryPrompt) {
  const Tokenizer tok = SmallTokenizer();
  RandomDatasetOptions o = Options(20, 40, 4, 11);
  o.prefix_len = 24;
  auto reqs = SampleRandom(o, tok);
  ASSERT_TRUE(reqs.ok()) << reqs.message();
  ExpectPromptLensAreServerCounts(tok, *reqs);
  for (const SampleRequest& r : *reqs) EXPECT_EQ(r.prompt_len, 24 + 39 + 1);
  // The prefix ids are the same, but re-encoding the text may merge across the prefix/body
  // boundary (and merges inside the random prefix shorten it), so only most of the prefix is
  // guaranteed to come back as the same ids in every prompt.
  EXPECT_GE(CommonIdPrefix(tok, *reqs), 24u * 3 / 4);
  o.prefix_len = 0;  // control: without a prefix the prompts start differently
  auto bare = SampleRandom(o, tok);
  ASSERT_TRUE(bare.ok());
  EXPECT_LT(CommonIdPrefix(tok, *bare), 4u);
}

TEST(BenchDatasetsTest, SameSeedSamePromptsOtherSeedOtherPrompts) {
  const Tokenizer tok = SmallTokenizer();
  RandomDatasetOptions o = Options(10, 30, 8, 9);
  o.range_ratio = 0.3;
  o.prefix_len = 5;
  auto a = SampleRandom(o, tok), b = SampleRandom(o, tok);
  o.seed = 10;
  auto c = SampleRandom(o, tok);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto key = [](const std::vector<SampleRequest>& v) {
    std::vector<std::tuple<std::string, int, int>> k;
    for (const SampleRequest& r : v) k.emplace_back(r.prompt, r.prompt_len, r.expected_output_len);
    return k;
  };
  EXPECT_EQ(key(*a), key(*b));
  EXPECT_NE(key(*a), key(*c));
}

TEST(BenchDatasetsTest, PromptLenIsTheServerCountEvenWhenTheFixUpCannotConverge) {
  // No U+FFFD piece here: a lone invalid byte decodes to U+FFFD and re-encodes to 3 byte
  // tokens, so some targets are never hit; prompt_len must still be the prompt's real count.
  json vocab = json::object();
  vocab["<bos>"] = 0;
  vocab["<unk>"] = 1;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = b + 2;
  }
  const json j = {
      {"added_tokens", json::array({{{"id", 0}, {"content", "<bos>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<unk>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "ByteFallback"}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", json::array()}}},
  };
  auto tok = Tokenizer::FromJson(j.dump(), "bytes_only.json");
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto reqs = SampleRandom(Options(40, 50, 4, 0), *tok);
  ASSERT_TRUE(reqs.ok()) << reqs.message();
  ExpectPromptLensAreServerCounts(*tok, *reqs);
}

TEST(BenchDatasetsTest, RejectsBadRandomOptions) {
  const Tokenizer tok = SmallTokenizer();
  auto error = [&](const RandomDatasetOptions& o) {
    auto r = SampleRandom(o, tok);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.message().find('\n'), std::string::npos);
    return r.ok() ? std::string() : r.message();
  };
  RandomDatasetOptions o = Options(4, 16, 4, 0);
  o.range_ratio = 1.0;
  EXPECT_NE(error(o).find("--random-range-ratio"), std::string::npos);
  o.range_ratio = -0.1;
  EXPECT_NE(error(o).find("[0, 1)"), std::string::npos);
  o.range_ratio = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error(o).find("--random-range-ratio"), std::string::npos);
  o = Options(0, 16, 4, 0);
  EXPECT_NE(error(o).find("--num-prompts"), std::string::npos);
  o = Options(4, 1, 4, 0);  // only <bos> would be left
  EXPECT_NE(error(o).find("--random-input-len 1 is too small"), std::string::npos);
  o = Options(4, 3, 4, 0);
  o.range_ratio = 0.9;  // floor(2 * 0.1) = 0: a prompt could be empty
  EXPECT_NE(error(o).find("too small"), std::string::npos);
  o = Options(4, 16, 4, 0);
  o.prefix_len = -1;
  EXPECT_NE(error(o).find("--random-prefix-len"), std::string::npos);

  // vLLM's rule counts the prefix: input_len 1 with a prefix is a prefix-only prompt.
  o = Options(3, 1, 4, 0);
  o.prefix_len = 6;
  auto prefix_only = SampleRandom(o, tok);
  ASSERT_TRUE(prefix_only.ok()) << prefix_only.message();
  for (const SampleRequest& r : *prefix_only) EXPECT_EQ(r.prompt_len, 7);

  const json only_specials = {
      {"added_tokens", json::array({{{"id", 0}, {"content", "<bos>"}, {"special", true}}})},
      {"model", {{"type", "BPE"}, {"vocab", {{"<bos>", 0}}}, {"merges", json::array()}}},
  };
  auto bare = Tokenizer::FromJson(only_specials.dump(), "only_specials.json");
  ASSERT_TRUE(bare.ok()) << bare.message();
  auto r = SampleRandom(Options(1, 8, 4, 0), *bare);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("non-special"), std::string::npos) << r.message();
}

// ---- The real Gemma 3 tokenizer (fetched by scripts/fetch_tokenizer.sh) ----

TEST(BenchDatasetsGemma3Test, PromptsHaveExactLengthsRangesAndASharedPrefix) {
  const std::string path = RealTokenizerPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing; run scripts/fetch_tokenizer.sh";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.message();
  ASSERT_EQ(NumSpecialTokensToAdd(*tok), 1);

  auto fixed = SampleRandom(Options(40, 512, 128, 0), *tok);
  ASSERT_TRUE(fixed.ok()) << fixed.message();
  ExpectPromptLensAreServerCounts(*tok, *fixed);
  for (const SampleRequest& r : *fixed) {
    EXPECT_EQ(r.prompt_len, 512);  // 511 generated, the server's <bos> makes 512
    EXPECT_EQ(r.expected_output_len, 128);
  }

  RandomDatasetOptions o = Options(40, 257, 64, 1);
  o.range_ratio = 0.5;
  o.prefix_len = 64;
  auto spread = SampleRandom(o, *tok);
  ASSERT_TRUE(spread.ok()) << spread.message();
  ExpectPromptLensAreServerCounts(*tok, *spread);
  for (const SampleRequest& r : *spread) {
    EXPECT_GE(r.prompt_len, 64 + 128 + 1);
    EXPECT_LE(r.prompt_len, 64 + 384 + 1);
    EXPECT_GE(r.expected_output_len, 32);
    EXPECT_LE(r.expected_output_len, 96);
  }
  // See SharedPrefixIsTheSameInEveryPrompt: near-boundary merges may take a few prefix ids.
  EXPECT_GE(CommonIdPrefix(*tok, *spread), 64u - 8);
  o.prefix_len = 0;
  auto bare = SampleRandom(o, *tok);
  ASSERT_TRUE(bare.ok());
  EXPECT_LT(CommonIdPrefix(*tok, *bare), 2u);
}

// ---- JSONL ----

// JSONL files in a per-process temp directory, removed when the test ends.
class JsonlFiles {
 public:
  JsonlFiles() : dir_(TestTempDir("gk_bench_jsonl")) { std::filesystem::create_directories(dir_); }
  ~JsonlFiles() { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& contents) const {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomic(path, contents).ok());
    return path;
  }

 private:
  std::string dir_;
};

TEST(BenchDatasetsTest, LoadsJsonlPromptsAndOutputLengths) {
  const JsonlFiles files;
  const std::string path = files.Write("ok.jsonl",
                                       "{\"prompt\": \"abc\", \"output_len\": 5}\n"
                                       "\n"
                                       "   \r\n"
                                       "{\"prompt\": \"a b\", \"max_tokens\": 9}\r\n"
                                       "{\"prompt\": \"\", \"extra\": [1, 2]}\n"
                                       "{\"prompt\": \"c\", \"output_len\": 3, \"max_tokens\": 4}");  // no final \n
  auto plain = LoadJsonl(path, 128, 0, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.message();
  ASSERT_EQ(plain->size(), 4u);
  EXPECT_EQ((*plain)[0].prompt, "abc");
  EXPECT_EQ((*plain)[0].expected_output_len, 5);
  EXPECT_EQ((*plain)[0].prompt_len, 0);  // no tokenizer: the server's usage fills it in
  EXPECT_EQ((*plain)[1].prompt, "a b");
  EXPECT_EQ((*plain)[1].expected_output_len, 9);
  EXPECT_EQ((*plain)[2].prompt, "");
  EXPECT_EQ((*plain)[2].expected_output_len, 128);  // the default
  EXPECT_EQ((*plain)[3].expected_output_len, 3);    // output_len wins over max_tokens

  const Tokenizer tok = SmallTokenizer();
  auto counted = LoadJsonl(path, 128, 0, &tok);
  ASSERT_TRUE(counted.ok()) << counted.message();
  EXPECT_EQ((*counted)[0].prompt_len, 2);  // "abc" + <bos>
  EXPECT_EQ((*counted)[1].prompt_len, 1 + int(tok.Encode("a b").size()));
  EXPECT_EQ((*counted)[2].prompt_len, 1);
}

TEST(BenchDatasetsTest, JsonlNumPromptsTakesTheFirstAndCycles) {
  const JsonlFiles files;
  const std::string path = files.Write("cycle.jsonl", "{\"prompt\": \"x\"}\n{\"prompt\": \"y\"}\n");
  auto first = LoadJsonl(path, 16, 1, nullptr);
  ASSERT_TRUE(first.ok()) << first.message();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].prompt, "x");
  const Tokenizer tok = SmallTokenizer();
  auto cycled = LoadJsonl(path, 16, 5, &tok);
  ASSERT_TRUE(cycled.ok()) << cycled.message();
  std::vector<std::string> prompts;
  for (const SampleRequest& r : *cycled) {
    prompts.push_back(r.prompt);
    EXPECT_EQ(r.prompt_len, 2);
    EXPECT_EQ(r.expected_output_len, 16);
  }
  EXPECT_EQ(prompts, (std::vector<std::string>{"x", "y", "x", "y", "x"}));
}

TEST(BenchDatasetsTest, JsonlErrorsNameFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\",}\n", ":3: not valid JSON"},
      {"{\"prompt\": \"a\", \"output_len\": 1e999}\n", ":1: not valid JSON: number overflow"},
      {"{\"prompt\": \"a\"}\n[\"a\"]\n", ":2: expected a JSON object"},
      {"{\"text\": \"a\"}\n", ":1: no \"prompt\" string"},
      {"{\"prompt\": 5}\n", ":1: no \"prompt\" string"},
      {"{\"prompt\": \"a\", \"output_len\": \"9\"}\n", ":1: \"output_len\" must be a positive integer, got \"9\""},
      {"{\"prompt\": \"a\", \"output_len\": 0}\n", ":1: \"output_len\" must be a positive integer"},
      {"{\"prompt\": \"a\", \"max_tokens\": -3}\n", ":1: \"max_tokens\" must be a positive integer"},
      {"{\"prompt\": \"a\", \"max_tokens\": 1.5}\n", ":1: \"max_tokens\" must be a positive integer"},
      {"", ": no prompts"},
      {"\n  \n\n", ": no prompts"},
  };
  const JsonlFiles files;
  int n = 0;
  for (const auto& [contents, why] : cases) {
    const std::string path = files.Write("bad" + std::to_string(n++) + ".jsonl", contents);
    auto r = LoadJsonl(path, 16, 1, nullptr);  // num_prompts 1: later lines are still checked
    ASSERT_FALSE(r.ok()) << contents;
    EXPECT_EQ(r.message().rfind(path + why, 0), 0u) << r.message();
    EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  }
  auto no_default = LoadJsonl(files.Write("nodefault.jsonl", "{\"prompt\": \"a\"}\n"), 0, 0, nullptr);
  ASSERT_FALSE(no_default.ok());
  EXPECT_NE(no_default.message().find(":1: no \"output_len\" or \"max_tokens\""), std::string::npos);
  auto missing = LoadJsonl("/nonexistent/prompts.jsonl", 16, 0, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/prompts.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace gk::bench
