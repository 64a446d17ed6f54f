#include "tools/data/sft_prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "formats/chat_template.h"
#include "formats/gemma4_tokens.h"
#include "formats/layout_tokenizer_test_util.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::data {
namespace {

// The built-in templates: a model directory without a template of its own.
ChatFormat Builtin(BuiltinChat which) {
  const std::string dir = TestTempDir("gk_sft_builtin_format");
  std::filesystem::create_directories(dir);
  return ChatFormat::ForModel(dir, which).value();
}
ChatFormat Gemma4Format() { return Builtin(BuiltinChat::kGemma4); }
ChatFormat Gemma3Format() { return Builtin(BuiltinChat::kGemma3); }

std::string Cleaned(const std::string& response) {
  auto r = CleanCodeV1Response(response);
  return r.ok() ? *r : "ERROR " + r.message();
}

// ---- CleanCodeV1Response ----

TEST(CleanCodeV1ResponseTest, KeepsTheFirstVerilogBlockOfTheAnswer) {
  EXPECT_EQ(Cleaned("<think>\nI need an AND gate.\n```verilog\nmodule draft; endmodule\n```\n</think>\n"
                    "<answer>\nHere it is:\n```verilog\nmodule and2(input a, b, output y);\n  assign y = a & b;\n"
                    "endmodule\n```\nand a second one:\n```verilog\nmodule other; endmodule\n```\n</answer>"),
            "```verilog\nmodule and2(input a, b, output y);\n  assign y = a & b;\nendmodule\n```");
  // The synth-verilog layout (tests/eval/synth_verilog_test.py's RESPONSE_RE).
  EXPECT_EQ(Cleaned("<think>\nplan\n</think>\n<answer>\n```verilog\nmodule m;\nendmodule\n```\n</answer>"),
            "```verilog\nmodule m;\nendmodule\n```");
}

TEST(CleanCodeV1ResponseTest, WithoutAnAnswerBlockUsesTheTextAfterThinking) {
  EXPECT_EQ(Cleaned("<think>```verilog\nmodule draft;\n```</think>Final:\n```verilog\nmodule m;\n```"),
            "```verilog\nmodule m;\n```");
  EXPECT_EQ(Cleaned("```verilog\nmodule m;\n```"), "```verilog\nmodule m;\n```");  // no tags at all
  // An unclosed answer runs to the end.
  EXPECT_EQ(Cleaned("<answer>```verilog\nmodule m;\n```"), "```verilog\nmodule m;\n```");
}

TEST(CleanCodeV1ResponseTest, UnclosedAndStrayThinkTags) {
  // An unclosed <think> runs to <answer>...
  EXPECT_EQ(Cleaned("<think>plan\n```verilog\nmodule draft;\n```\n<answer>```verilog\nmodule m;\n```</answer>"),
            "```verilog\nmodule m;\n```");
  // ... or to the end: cut-off reasoning is not an answer, even with draft code in it.
  EXPECT_EQ(Cleaned("<think>plan\n```verilog\nmodule draft;\n```\n"), "ERROR no_code: no ```verilog block");
  // A closing tag with no opening one ends reasoning that began at the start.
  EXPECT_EQ(Cleaned("plan\n```verilog\nmodule draft;\n```\n</think>\n```verilog\nmodule m;\n```"),
            "```verilog\nmodule m;\n```");
  // Several blocks all go.
  EXPECT_EQ(Cleaned("<think>a</think>x<think>```verilog\nmodule d;\n```</think>```verilog\nmodule m;\n```"),
            "```verilog\nmodule m;\n```");
}

TEST(CleanCodeV1ResponseTest, FenceRules) {
  // Only the "verilog" info string counts (the reference's rule).
  EXPECT_EQ(Cleaned("<answer>```systemverilog\nmodule m;\n```</answer>"), "ERROR no_code: no ```verilog block");
  EXPECT_EQ(Cleaned("<answer>```\nmodule m;\n```</answer>"), "ERROR no_code: no ```verilog block");
  EXPECT_EQ(Cleaned("<answer>```verilogx\nmodule x;\n```\n```verilog\nmodule m;\n```</answer>"),
            "```verilog\nmodule m;\n```");
  EXPECT_EQ(Cleaned("```verilog  \r\nmodule m;\r\n```"), "```verilog\nmodule m;\n```");  // trailing blanks, CRLF
  // Code inside the think block only, or outside the answer block, does not count.
  EXPECT_EQ(Cleaned("<think>```verilog\nmodule m;\n```</think><answer>done</answer>"),
            "ERROR no_code: no ```verilog block");
  EXPECT_EQ(Cleaned("```verilog\nmodule m;\n```<answer>done</answer>"), "ERROR no_code: no ```verilog block");
  EXPECT_EQ(Cleaned("<answer>```verilog\nmodule m;\n</answer>"),
            "ERROR no_code: the ```verilog block is not closed");
  EXPECT_EQ(Cleaned(""), "ERROR no_code: no ```verilog block");
}

TEST(CleanCodeV1ResponseTest, TrimsBlankLinesButKeepsIndentation) {
  EXPECT_EQ(Cleaned("```verilog\n\n  \n    assign y = a;\n  endmodule  \n\n \n```"),
            "```verilog\n    assign y = a;\n  endmodule\n```");
  EXPECT_EQ(Cleaned("```verilog\n \n\n```"), "ERROR empty: the ```verilog block is empty");
  EXPECT_EQ(Cleaned("```verilog\nmodule m; endmodule```"), "```verilog\nmodule m; endmodule\n```");
}

// ---- TokenizeSftConversation ----

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TokenizeSftConversationTest, ExactIdsAndMaskWithTheLayoutTokenizer) {
  // No merges: one id per character. a=365 ... z=390, "\n"=107.
  const Tokenizer tok = LayoutTokenizer(/*gemma4_names=*/true);
  auto row = TokenizeSftConversation(tok, Gemma4Format(), "  hi\n", "\nok ", LossMode::kAssistant);
  ASSERT_TRUE(row.ok()) << row.message();
  const std::vector<int32_t> want = {
      2,   105, 385, 383, 369, 382, 107, 372, 373, 106, 107,  // <bos><|turn>user\nhi<turn|>\n
      105, 377, 379, 368, 369, 376, 107,                      // <|turn>model\n
      379, 375, 106, 107};                                    // ok<turn|>\n
  EXPECT_EQ(row->tokens, want);
  std::vector<uint8_t> mask(want.size(), 0);
  mask[18] = mask[19] = mask[20] = 1;  // "o", "k", <turn|>
  EXPECT_EQ(row->loss_mask, mask);

  auto all = TokenizeSftConversation(tok, Gemma4Format(), "  hi\n", "\nok ", LossMode::kAll);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->tokens, want);
  std::vector<uint8_t> all_mask(want.size(), 1);
  all_mask[0] = 0;
  EXPECT_EQ(all->loss_mask, all_mask);

  // Gemma 3 names on the same slots, for a Gemma 3 model: the same ids.
  auto g3 = TokenizeSftConversation(LayoutTokenizer(false), Gemma3Format(), "hi", "ok", LossMode::kAssistant);
  ASSERT_TRUE(g3.ok()) << g3.message();
  EXPECT_EQ(g3->tokens, want);
  EXPECT_EQ(g3->loss_mask, mask);

  // Marker text typed by the user stays text.
  auto typed = TokenizeSftConversation(tok, Gemma4Format(), "<|turn>", "ok", LossMode::kAssistant);
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ(std::count(typed->tokens.begin(), typed->tokens.end(), 105), 2);

  EXPECT_FALSE(TokenizeSftConversation(tok, Gemma4Format(), " \n", "ok", LossMode::kAll).ok());
  EXPECT_FALSE(TokenizeSftConversation(tok, Gemma4Format(), "hi", "", LossMode::kAll).ok());
}

TEST(TokenizeSftConversationTest, RefusesATokenizerWithoutGemmaTurnMarkers) {
  nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"vocab", {{"<bos>", 0}, {"a", 1}}}, {"merges", nlohmann::json::array()}}}};
  auto tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto row = TokenizeSftConversation(*tok, Gemma4Format(), "a", "a", LossMode::kAll);
  ASSERT_FALSE(row.ok());
  EXPECT_NE(row.message().find("ids 105 and 106"), std::string::npos) << row.message();
}

std::string RealTokenizerPath() { return std::string(GK_SOURCE_DIR) + "/build/tokenizer/gemma3/tokenizer.json"; }

TEST(TokenizeSftConversationRealTokenizerTest, ExactIdsAndEqualsTheChatTemplate) {
  if (!std::filesystem::exists(RealTokenizerPath()))
    GTEST_SKIP() << RealTokenizerPath() << " missing; run scripts/fetch_tokenizer.sh";
  auto text = ReadFile(RealTokenizerPath());
  ASSERT_TRUE(text.ok()) << text.message();
  auto g3 = Tokenizer::FromJson(*text);
  ASSERT_TRUE(g3.ok()) << g3.message();
  auto g4 = Tokenizer::FromJson(RenameToGemma4Tokens(*text).value());
  ASSERT_TRUE(g4.ok()) << g4.message();

  const std::string prompt = " Write module `and2`: y = a & b.\n";
  const std::string answer = "```verilog\nmodule and2(input a, b, output y);\n  assign y = a & b;\nendmodule\n```";
  auto row = TokenizeSftConversation(*g4, Gemma4Format(), prompt, answer, LossMode::kAssistant);
  ASSERT_TRUE(row.ok()) << row.message();
  // Pieces: <bos> <|turn> user \n Write ▁module ▁` and 2 `: ▁y ▁= ▁a ▁& ▁b . <turn|> \n <|turn> model \n
  const std::vector<int32_t> header = {2,   105, 2364, 107, 6974, 9173, 2165, 624, 236778, 75118, 570,
                                       578, 496, 833,  518, 236761, 106, 107, 105, 4368, 107};
  // ``` ver ilog \n module ▁and 2 ( input ▁a , ▁b , ▁output ▁y ); \n ▁▁ assign ▁y ▁= ▁a ▁& ▁b ; \n end module \n ```
  const std::vector<int32_t> body = {2717, 595, 114641, 107, 7498, 532, 236778, 236769, 2427, 496, 236764, 518, 236764,
                                     3938, 570, 626, 107, 138, 9983, 570, 578, 496, 833, 518, 236793, 107, 643, 7498,
                                     107, 2717};
  EXPECT_EQ(row->tokens, Concat({header, body, {106, 107}}));
  std::vector<uint8_t> mask(header.size(), 0);
  mask.insert(mask.end(), body.size() + 1, 1);  // the body and <turn|>
  mask.push_back(0);                            // not the trailing "\n"
  EXPECT_EQ(row->loss_mask, mask);
  EXPECT_EQ(std::accumulate(mask.begin(), mask.end(), 0), 31);

  // The same stream as the chat template's rendering of the conversation without a generation
  // prompt (so no empty thought block), and as Hugging Face's tokenizing of the Gemma 3 text.
  const std::vector<ChatMessage> chat = {{"user", prompt}, {"assistant", answer}};
  const ChatTemplateOptions no_prompt{.add_generation_prompt = false};
  EXPECT_EQ(row->tokens, ApplyGemma4ChatTemplate(*g4, chat, no_prompt).value());
  EXPECT_EQ(row->tokens, ApplyGemma3ChatTemplate(*g3, chat, no_prompt).value());
  EXPECT_EQ(row->tokens, g3->Encode(RenderGemma3ChatText(chat, no_prompt).value()));
  auto row3 = TokenizeSftConversation(*g3, Gemma3Format(), prompt, answer, LossMode::kAssistant);
  ASSERT_TRUE(row3.ok()) << row3.message();
  EXPECT_EQ(row3->tokens, row->tokens);
  EXPECT_EQ(row3->loss_mask, row->loss_mask);
}

// ---- PrepareSft ----

std::string WriteJsonl(const std::string& name, const std::string& text) {
  const std::string dir = TestTempDir(name);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/sft.jsonl";
  EXPECT_TRUE(WriteFileAtomic(path, text).ok());
  return path;
}

const char kGoodResponse[] = R"(<think>\nplan\n</think>\n<answer>\n```verilog\nab\n```\n</answer>)";

std::string BadRowsFile() {
  const std::string long_prompt(100, 'x');
  const std::vector<std::string> lines = {
      StrCat(R"({"system": "You write Verilog.", "prompt": "hi", "response": ")", kGoodResponse, "\"}"),  // 1 kept
      "",                                                                     // 2 blank
      "   ",                                                                  // 3 blank
      "{not json",                                                            // 4 invalid_json
      "[1, 2]",                                                               // 5 invalid_json
      R"({"prompt": "hi"})",                                                  // 6 missing_field
      R"({"prompt": "hi", "response": 5})",                                   // 7 missing_field
      R"({"prompt": "hi", "response": "no code here"})",                      // 8 no_code
      R"({"prompt": " \n ", "response": "```verilog\nab\n```"})",             // 9 empty
      R"({"prompt": "hi", "response": "```verilog\n\n```"})",                 // 10 empty
      "{\"prompt\": \"h\xff\", \"response\": \"```verilog\\nab\\n```\"}",     // 11 invalid_utf8
      StrCat(R"({"prompt": ")", long_prompt, R"(", "response": "```verilog\nab\n```"})"),  // 12 too_long
      R"({"system": 5, "prompt": "yo", "response": "```verilog\nx\n```"})" "\r",  // 13 kept, CRLF
      "null",                                                                 // 14 invalid_json
      R"({"prompt": "hi", "response": "<think>```verilog\nab\n```"})",        // 15 no_code
  };
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text + R"({"prompt": "hi", "response": "```verilog\nab\n```"})";  // 16 kept, no final newline
}

TEST(PrepareSftTest, CountsAndSkipsEveryKindOfBadRow) {
  const std::string path = WriteJsonl("gk_sft_bad_rows", BadRowsFile());
  const Tokenizer tok = LayoutTokenizer(true);
  SftPrepareOptions o;
  o.max_seq_len = 60;
  SftPrepareReport rep;
  auto rows = PrepareSft(path, tok, Gemma4Format(), o, &rep);
  ASSERT_TRUE(rows.ok()) << rows.message();
  EXPECT_EQ(rep.raw, 14);  // blank lines are not rows
  EXPECT_EQ(rep.kept, 3);
  const std::map<std::string, int64_t> want = {{"invalid_json", 3}, {"missing_field", 2}, {"no_code", 2},
                                                {"empty", 2},        {"invalid_utf8", 1},  {"too_long", 1}};
  EXPECT_EQ(rep.dropped, want);
  EXPECT_EQ(rep.examples, (std::vector<std::string>{"line 4: invalid_json: not valid JSON",
                                                    "line 5: invalid_json: a JSON array, not an object",
                                                    "line 6: missing_field: no \"response\" field",
                                                    "line 7: missing_field: \"response\" is a number, not a string",
                                                    "line 8: no_code: no ```verilog block"}));
  ASSERT_EQ(rows->size(), 3u);
  // Row 1: <bos><|turn>"user\nhi"<turn|>"\n"<|turn>"model\n" + "```verilog\nab\n```" (17 ids:
  // backticks are byte tokens) + <turn|>"\n" = 37 ids, 18 of them targets.
  EXPECT_EQ((*rows)[0].tokens.size(), 37u);
  EXPECT_EQ(std::accumulate((*rows)[0].loss_mask.begin(), (*rows)[0].loss_mask.end(), 0), 18);
  const std::vector<int32_t> want_row0 = TokenizeSftConversation(tok, Gemma4Format(), "hi", "```verilog\nab\n```",
                                                                 LossMode::kAssistant)
                                             ->tokens;
  EXPECT_EQ((*rows)[0].tokens, want_row0);
  EXPECT_EQ((*rows)[1].tokens, TokenizeSftConversation(tok, Gemma4Format(), "yo", "```verilog\nx\n```",
                                                       LossMode::kAssistant)
                                   ->tokens);
  int64_t tokens = 0, loss = 0;
  for (const TokenRow& r : *rows) {
    tokens += int64_t(r.tokens.size());
    loss += std::accumulate(r.loss_mask.begin(), r.loss_mask.end(), int64_t{0});
  }
  EXPECT_EQ(rep.tokens, tokens);
  EXPECT_EQ(rep.loss_tokens, loss);
  EXPECT_EQ(tokens, 37 + 36 + 37);

  // Loss over everything: every token but the first of each row.
  o.loss = LossMode::kAll;
  SftPrepareReport all;
  ASSERT_TRUE(PrepareSft(path, tok, Gemma4Format(), o, &all).ok());
  EXPECT_EQ(all.loss_tokens, all.tokens - all.kept);

  // A longer limit keeps the long row.
  o.max_seq_len = 1000;
  SftPrepareReport longer;
  ASSERT_TRUE(PrepareSft(path, tok, Gemma4Format(), o, &longer).ok());
  EXPECT_EQ(longer.kept, 4);
  EXPECT_EQ(longer.dropped["too_long"], 0);
}

TEST(PrepareSftTest, MaxRowsCountsInputRows) {
  const std::string path = WriteJsonl("gk_sft_max_rows", BadRowsFile());
  SftPrepareOptions o;
  o.max_rows = 3;  // lines 1, 4 and 5: the blank lines 2-3 are not rows
  SftPrepareReport rep;
  auto rows = PrepareSft(path, LayoutTokenizer(true), Gemma4Format(), o, &rep);
  ASSERT_TRUE(rows.ok()) << rows.message();
  EXPECT_EQ(rep.raw, 3);
  EXPECT_EQ(rep.kept, 1);
  EXPECT_EQ(rep.dropped["invalid_json"], 2);
}

TEST(PrepareSftTest, OnlyAnUnreadableFileIsAnError) {
  SftPrepareReport rep;
  auto missing = PrepareSft("/nonexistent/sft.jsonl", LayoutTokenizer(true), Gemma4Format(), {}, &rep);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/sft.jsonl"), std::string::npos) << missing.message();
  // A device would be read forever (one endless line of NULs); a directory reads as nothing.
  EXPECT_EQ(PrepareSft("/dev/zero", LayoutTokenizer(true), Gemma4Format(), {}, &rep).message(),
            "cannot read /dev/zero: it is a device, not a file");
  EXPECT_EQ(PrepareSft("/tmp", LayoutTokenizer(true), Gemma4Format(), {}, &rep).message(),
            "cannot read /tmp: it is a directory");

  static const char kGarbage[] = "\x00\x01\xfe{{{\n[[[[[[\n\"x\n";
  const std::string path = WriteJsonl("gk_sft_garbage", std::string(kGarbage, sizeof(kGarbage) - 1));
  auto garbage = PrepareSft(path, LayoutTokenizer(true), Gemma4Format(), {}, &rep);
  ASSERT_TRUE(garbage.ok()) << garbage.message();
  EXPECT_EQ(rep.raw, 3);
  EXPECT_EQ(rep.kept, 0);
  EXPECT_EQ(garbage->size(), 0u);

  const std::string empty = WriteJsonl("gk_sft_empty", "");
  ASSERT_TRUE(PrepareSft(empty, LayoutTokenizer(true), Gemma4Format(), {}, &rep).ok());
  EXPECT_EQ(rep.raw, 0);
}

// ---- Length statistics ----

TEST(LengthStatsTest, PercentilesEqualNumpysLinearInterpolation) {
  // np.percentile([1, 2, 3, 4, 10], [50, 90, 95, 99, 99.9]): index h = q/100 · 4 between sorted
  // neighbours, e.g. p90: h = 3.6 -> 4 + 0.6 · (10 - 4) = 7.6. The literals are numpy's repr.
  LengthStats s = ComputeLengthStats({10, 3, 1, 4, 2}, 4);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 10);
  EXPECT_EQ(s.total_tokens, 20);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_EQ(s.percentiles["p50"], 3.0);
  EXPECT_EQ(s.percentiles["p90"], 7.6000000000000005);
  EXPECT_EQ(s.percentiles["p95"], 8.799999999999999);
  EXPECT_EQ(s.percentiles["p99"], 9.76);
  EXPECT_EQ(s.percentiles["p99.9"], 9.976000000000003);
  // Bins (0,4], (4,8], (8,12].
  EXPECT_EQ(s.histogram, (std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 0}, {12, 1}}));

  LengthStats one = ComputeLengthStats({7});
  for (const auto& [name, v] : one.percentiles) EXPECT_EQ(v, 7.0) << name;
}

TEST(LengthStatsTest, RowsOverEachCandidateAndBinEdges) {
  // np.percentile([100, 1500, 3000, 3072, 3073, 5000, 9000], 90) = 6600.000000000002
  const LengthStats s = ComputeLengthStats({3073, 100, 9000, 1500, 3000, 3072, 5000}, 1024);
  EXPECT_EQ(s.percentiles.at("p50"), 3072.0);
  EXPECT_EQ(s.percentiles.at("p90"), 6600.000000000002);
  EXPECT_EQ(s.percentiles.at("p99.9"), 8976.000000000002);
  // "over" is strictly longer: a row of exactly max_seq_len tokens is kept.
  const std::map<int64_t, int64_t> over = {{1024, 6}, {2048, 5}, {3072, 3}, {4096, 2}, {8192, 1}};
  EXPECT_EQ(s.rows_over, over);
  // 3072 sits in the bin ending at 3072, 3073 in the next one.
  const std::vector<std::pair<int64_t, int64_t>> hist = {{1024, 1}, {2048, 1}, {3072, 2}, {4096, 1},
                                                         {5120, 1}, {6144, 0}, {7168, 0}, {8192, 0}, {9216, 1}};
  EXPECT_EQ(s.histogram, hist);

  const std::string text = FormatLengthStats(s);
  EXPECT_NE(text.find("rows 7, tokens 24745"), std::string::npos) << text;
  EXPECT_NE(text.find("p90 6600.0"), std::string::npos) << text;
  EXPECT_NE(text.find("    3072         3  ( 42.86 %; 57.14 % kept)"), std::string::npos) << text;
  EXPECT_NE(text.find("(  2048,   3072]         2  ########################################\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("(  3072,   4096]         1  ####################\n"), std::string::npos) << text;
  // The run of empty bins (5120, 8192] is one line.
  EXPECT_NE(text.find("\n  (  5120,   8192]         0  \n  (  8192,   9216]         1  #"), std::string::npos) << text;
  EXPECT_EQ(FormatLengthStats(ComputeLengthStats({})), "no rows\n");
}

// A row with a number too large for a double is dropped like any invalid JSON, not an abort.
TEST(PrepareSftTest, NumberTooLargeForADoubleIsAnInvalidRow) {
  const std::string path = WriteJsonl("gk_sft_huge_number", R"({"prompt": "hi", "response": "x", "n": 1e999})");
  SftPrepareOptions o;
  SftPrepareReport rep;
  auto rows = PrepareSft(path, LayoutTokenizer(true), Gemma4Format(), o, &rep);
  ASSERT_TRUE(rows.ok()) << rows.message();
  EXPECT_EQ(rep.dropped["invalid_json"], 1);
  EXPECT_EQ(rep.examples, (std::vector<std::string>{"line 1: invalid_json: not valid JSON"}));
}

}  // namespace
}  // namespace gk::data
