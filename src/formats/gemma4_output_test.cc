// Gemma 4 output split into reasoning, content and tool calls, whole and streamed in every
// possible chunking; tool-call arguments written by the official template's format_argument.
#include "formats/gemma4_output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gk {
namespace {

// Streams `text` in chunks of `step` bytes and joins what comes out.
Gemma4Output Streamed(std::string_view text, size_t step, Gemma4OutputOptions o = {}) {
  Gemma4OutputStream stream(o);
  Gemma4Output all;
  auto add = [&](Gemma4Output d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
  };
  for (size_t i = 0; i < text.size(); i += step) add(stream.Add(text.substr(i, step)));
  add(stream.Finish());
  return all;
}

void ExpectSame(const Gemma4Output& a, const Gemma4Output& b) {
  EXPECT_EQ(a.reasoning, b.reasoning);
  EXPECT_EQ(a.content, b.content);
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name);
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments);
  }
}

TEST(Gemma4OutputTest, ReasoningAndContent) {
  const std::string text = "<|channel>thought\nThe user wants 2+2.<channel|>It is 4.";
  const Gemma4Output o = ParseGemma4Output(text);
  EXPECT_EQ(o.reasoning, "The user wants 2+2.");
  EXPECT_EQ(o.content, "It is 4.");
  EXPECT_TRUE(o.tool_calls.empty());
  for (size_t step = 1; step <= text.size(); ++step) ExpectSame(Streamed(text, step), o);
  // Off: the whole text is content, as the model wrote it.
  EXPECT_EQ(ParseGemma4Output(text, {.reasoning = false}).content, text);
  // Only at the start: later channel text is content.
  EXPECT_EQ(ParseGemma4Output("Hi <|channel>x<channel|>").content, "Hi <|channel>x<channel|>");
  // Unfinished thought (max_tokens hit): all reasoning.
  EXPECT_EQ(ParseGemma4Output("<|channel>thought\nhmm, let me").reasoning, "hmm, let me");
  EXPECT_EQ(ParseGemma4Output("<|chan").content, "<|chan");
}

TEST(Gemma4OutputTest, ToolCalls) {
  const std::string text =
      "Let me check.<|tool_call>call:get_weather{location:<|\"|>Paris, FR<|\"|>,units:<|\"|>celsius<|\"|>,"
      "days:3,detail:true,ratio:0.5,tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],filter:{max:null,<|\"|>odd key<|\"|>:[]}}"
      "<tool_call|><|tool_call>call:now{}<tool_call|>";
  const Gemma4Output o = ParseGemma4Output(text);
  EXPECT_EQ(o.content, "Let me check.");
  ASSERT_EQ(o.tool_calls.size(), 2u);
  EXPECT_EQ(o.tool_calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(o.tool_calls[0].arguments),
            nlohmann::json::parse(R"({"location":"Paris, FR","units":"celsius","days":3,"detail":true,"ratio":0.5,)"
                                  R"("tags":["a","b"],"filter":{"max":null,"odd key":[]}})"));
  EXPECT_EQ(o.tool_calls[1].name, "now");
  EXPECT_EQ(o.tool_calls[1].arguments, "{}");
  EXPECT_TRUE(o.tool_calls[0].id.starts_with("call_"));
  EXPECT_NE(o.tool_calls[0].id, o.tool_calls[1].id);
  for (size_t step = 1; step <= text.size(); ++step) ExpectSame(Streamed(text, step), o);
  // Strings keep what the template would have escaped in JSON, and markers inside them.
  const Gemma4Output q = ParseGemma4Output("<|tool_call>call:echo{text:<|\"|>a \"b\" {c}, [d]\n<|\"|>}<tool_call|>");
  ASSERT_EQ(q.tool_calls.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(q.tool_calls[0].arguments)["text"], "a \"b\" {c}, [d]\n");
}

TEST(Gemma4OutputTest, MalformedToolCallsStayText) {
  for (const std::string body : {"call:f{a:<|\"|>unterminated}", "call:f{a:1", "f{a:1}", "call:{a:1}", "call:f{a 1}",
                                 "call:f{a:1}trailing", "call:bad name{}", "call:f{a:[1,2}"}) {
    const std::string text = "x<|tool_call>" + body + "<tool_call|>y";
    const Gemma4Output o = ParseGemma4Output(text);
    EXPECT_TRUE(o.tool_calls.empty()) << body;
    EXPECT_EQ(o.content, text) << body;
    ExpectSame(Streamed(text, 3), o);
  }
  // Never closed (generation ended): the text as written.
  EXPECT_EQ(ParseGemma4Output("a<|tool_call>call:f{").content, "a<|tool_call>call:f{");
  // Off: markers are text.
  EXPECT_TRUE(ParseGemma4Output("<|tool_call>call:f{}<tool_call|>", {.tool_calls = false}).tool_calls.empty());
  // Deep nesting is refused, not a stack overflow.
  std::string deep = "<|tool_call>call:f{a:" + std::string(5000, '[') + std::string(5000, ']') + "}<tool_call|>";
  EXPECT_TRUE(ParseGemma4Output(deep).tool_calls.empty());
}

TEST(Gemma4OutputTest, StreamingHoldsBackOnlyPossibleMarkers) {
  Gemma4OutputStream s;
  EXPECT_EQ(s.Add("<|channel>thought\nabc<chan").reasoning, "abc");  // "<chan" may start <channel|>
  EXPECT_EQ(s.Add("nel|>Hello <|to").reasoning, "");
  Gemma4Output d = s.Add("ol_call>call:f{x:1}");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.tool_calls.empty());  // not closed yet
  d = s.Add("<tool_call|> done");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.content, " done");
  EXPECT_EQ(s.Finish().content, "");
  Gemma4OutputStream plain;
  EXPECT_EQ(plain.Add("Hello").content, "Hello");  // no reason to wait
}

}  // namespace
}  // namespace gk
