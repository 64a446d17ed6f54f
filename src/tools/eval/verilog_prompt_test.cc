#include "tools/eval/verilog_prompt.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace gk::eval {
namespace {

const char* const kModule = "module TopModule(output zero);\n  assign zero = 1'b0;\nendmodule";

TEST(BuildVerilogPromptTest, StrippedProblemBlankLineThenHints) {
  const std::string problem =
      "\n  I would like you to implement a module named TopModule with the following interface.\n - output zero\n\n";
  const std::string p = BuildVerilogPrompt(problem);
  const std::string head =
      "I would like you to implement a module named TopModule with the following interface.\n - output zero\n\n";
  ASSERT_EQ(p.rfind(head, 0), 0u) << p;
  const std::string hints = p.substr(head.size());
  EXPECT_EQ(hints.find('\n'), std::string::npos);  // one paragraph of sentences
  EXPECT_NE(hints.find("`TopModule`"), std::string::npos);
  EXPECT_NE(hints.find("port name"), std::string::npos);
  EXPECT_NE(hints.find("always block as `reg`, not `wire`"), std::string::npos);
  EXPECT_NE(hints.find("array elements one at a time"), std::string::npos);
  EXPECT_NE(hints.find("only the Verilog code, inside a ```verilog"), std::string::npos);
  // No upstream framing: no Question/Answer, no [BEGIN]/[DONE].
  EXPECT_EQ(p.find("Question:"), std::string::npos);
  EXPECT_EQ(p.find("[BEGIN]"), std::string::npos);
  EXPECT_EQ(BuildVerilogPrompt("x\r\n"), BuildVerilogPrompt("x"));
}

TEST(ExtractVerilogTest, FencedBlockWithProseAround) {
  EXPECT_EQ(ExtractVerilog(std::string("Here is the design:\n```verilog\n") + kModule + "\n```\nIt ties zero low."),
            kModule);
  EXPECT_EQ(ExtractVerilog(std::string("```\n") + kModule + "\n```"), kModule);  // no tag
  EXPECT_EQ(ExtractVerilog(std::string("```verilog   \n\n") + kModule + "  \n\n```"), kModule);
}

TEST(ExtractVerilogTest, SvAndSystemverilogTags) {
  EXPECT_EQ(ExtractVerilog(std::string("```sv\n") + kModule + "\n```"), kModule);
  EXPECT_EQ(ExtractVerilog(std::string("```systemverilog\n") + kModule + "\n```"), kModule);
  // The tag needs no newline after it: the regex's \s* may match nothing.
  EXPECT_EQ(ExtractVerilog(std::string("```verilog") + kModule + "```"), kModule);
  // Only the three tags: anything else stays in the code, a digit suffix included.
  EXPECT_EQ(ExtractVerilog("```verilog2001\nmodule m; endmodule\n```"), "2001\nmodule m; endmodule");
  EXPECT_EQ(ExtractVerilog("```v\nmodule m; endmodule\n```"), "v\nmodule m; endmodule");
}

TEST(ExtractVerilogTest, CapitalVerilogTagBecomesTheFirstCodeLine) {
  // The reference's tags are case-sensitive; kept so scores match its (compile-error) verdict.
  EXPECT_EQ(ExtractVerilog(std::string("```Verilog\n") + kModule + "\n```"), std::string("Verilog\n") + kModule);
  EXPECT_EQ(ExtractVerilog(std::string("```SystemVerilog\n") + kModule + "\n```"),
            std::string("SystemVerilog\n") + kModule);
}

TEST(ExtractVerilogTest, UnclosedFence) {
  // Generation stopped at max_new_tokens inside the block.
  EXPECT_EQ(ExtractVerilog("```verilog\nmodule TopModule(output zero);\n  assign zero"),
            "module TopModule(output zero);\n  assign zero");
  EXPECT_EQ(ExtractVerilog(" \n```systemverilog\nmodule m;\n"), "module m;");
  EXPECT_EQ(ExtractVerilog("```sv\nmodule m;"), "module m;");
  EXPECT_EQ(ExtractVerilog("```\nmodule m;"), "module m;");
  EXPECT_EQ(ExtractVerilog("```Verilog\nmodule m;"), "Verilog\nmodule m;");
  // An opening fence after prose is not removed: the whole (stripped) text is the candidate.
  EXPECT_EQ(ExtractVerilog("Sure.\n```verilog\nmodule m;\n"), "Sure.\n```verilog\nmodule m;");
  // Fences that overlap: "````" has no closing ``` after the opening one.
  EXPECT_EQ(ExtractVerilog("````"), "`");
  EXPECT_EQ(ExtractVerilog("```"), "");
}

TEST(ExtractVerilogTest, NoFenceIsTheStrippedText) {
  EXPECT_EQ(ExtractVerilog(std::string("\n\n  ") + kModule + "\n \t"), kModule);
  EXPECT_EQ(ExtractVerilog(""), "");
  EXPECT_EQ(ExtractVerilog(" \n "), "");
  // Single backticks are Verilog compiler directives, not fences.
  EXPECT_EQ(ExtractVerilog("`timescale 1ns/1ps\nmodule m; endmodule"), "`timescale 1ns/1ps\nmodule m; endmodule");
}

TEST(ExtractVerilogTest, TwoBlocksGiveTheFirst) {
  EXPECT_EQ(ExtractVerilog("First:\n```verilog\nmodule a; endmodule\n```\nOr:\n```verilog\nmodule b; endmodule\n```"),
            "module a; endmodule");
  // A block's text ends at the first ``` even when a later block follows directly.
  EXPECT_EQ(ExtractVerilog("```verilog\nmodule a;\n``````sv\nmodule b;\n```"), "module a;");
  EXPECT_EQ(ExtractVerilog("``````"), "");
}

TEST(ExtractVerilogTest, CrLfLineEnds) {
  EXPECT_EQ(ExtractVerilog("Code:\r\n```verilog\r\nmodule a;\r\n  wire x;\r\nendmodule\r\n```\r\n"),
            "module a;\r\n  wire x;\r\nendmodule");
  EXPECT_EQ(ExtractVerilog("```verilog\r\nmodule a;\r\n"), "module a;");
  EXPECT_EQ(ExtractVerilog("\r\nmodule a; endmodule\r\n"), "module a; endmodule");
}

TEST(ExtractVerilogTest, UnicodeWhitespaceStripsAsPythonDoes) {
  // U+00A0 no-break space, U+3000 ideographic space, U+2028 line separator, U+0085 next line.
  EXPECT_EQ(ExtractVerilog("```verilog\xC2\xA0\nmodule a;\xE3\x80\x80```"), "module a;");
  EXPECT_EQ(ExtractVerilog("\xE2\x80\xA8module a;\xC2\x85"), "module a;");
  // Other multi-byte characters are kept whole.
  EXPECT_EQ(ExtractVerilog("```\n// caf\xC3\xA9\n```"), "// caf\xC3\xA9");
  EXPECT_EQ(ExtractVerilog("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");  // U+200B is not whitespace in Python
}

TEST(ExtractVerilogTest, LongInputsAreLinear) {
  std::string body;
  for (int i = 0; i < 20000; ++i) body += "  assign w" + std::to_string(i) + " = a & b;\n";  // ~0.5 MB
  const auto t0 = std::chrono::steady_clock::now();
  // 3 bytes fewer: the "\n  " before the first assign goes with the tag, the last "\n" is stripped.
  EXPECT_EQ(ExtractVerilog("```verilog\n" + body + "```").size(), body.size() - 3);
  EXPECT_EQ(ExtractVerilog("```verilog\n" + body).size(), body.size() - 3);  // unclosed
  EXPECT_EQ(ExtractVerilog(body + "``").size(), body.size());  // no fence; the 2 stripped spaces and "``" even out
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

}  // namespace
}  // namespace gk::eval
