// The lexer: tokens, line numbers, Python string escapes and jinja2's whitespace control.
#include "formats/jinja/lexer.h"

#include <gtest/gtest.h>

#include "formats/jinja/jinja_test_util.h"

namespace gk::jinja {
namespace {

using testing::RenderOrError;

std::string Kinds(const std::vector<Token>& tokens) {
  std::string out;
  for (const Token& t : tokens) {
    switch (t.type) {
      case TokenType::kData: out += "D(" + t.value + ")"; break;
      case TokenType::kVariableBegin: out += "{{"; break;
      case TokenType::kVariableEnd: out += "}}"; break;
      case TokenType::kBlockBegin: out += "{%"; break;
      case TokenType::kBlockEnd: out += "%}"; break;
      case TokenType::kName: out += "N(" + t.value + ")"; break;
      case TokenType::kString: out += "S(" + t.value + ")"; break;
      case TokenType::kInteger: out += "I(" + std::to_string(t.int_value) + ")"; break;
      case TokenType::kFloat: out += "F(" + t.value + ")"; break;
      case TokenType::kOperator: out += "O(" + t.value + ")"; break;
      case TokenType::kEof: out += "$"; break;
    }
  }
  return out;
}

TEST(JinjaLexerTest, SplitsTextTagsAndOperands) {
  Result<std::vector<Token>> tokens = Tokenize("a {{ x.y | f(1, 'b') }} {% if n >= 2.5 %}z{% endif %}");
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  EXPECT_EQ(Kinds(*tokens),
            "D(a ){{N(x)O(.)N(y)O(|)N(f)O(()I(1)O(,)S(b)O())}}D( ){%N(if)N(n)O(>=)F(2.5)%}D(z){%N(endif)%}$");
}

TEST(JinjaLexerTest, NumbersFollowJinjaPatterns) {
  Result<std::vector<Token>> tokens = Tokenize("{{ 0x1F 0o17 0b101 1_000 1.5e3 1e-2 007 }}");
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  // 007 is "00" then 7, as in jinja2 (its parser then rejects it).
  EXPECT_EQ(Kinds(*tokens), "{{I(31)I(15)I(5)I(1000)F(1.5e3)F(1e-2)I(0)I(7)}}$");
  EXPECT_EQ((*tokens)[5].float_value, 1500.0);
}

TEST(JinjaLexerTest, DecodesPythonStringEscapes) {
  Result<std::vector<Token>> tokens = Tokenize(R"({{ 'a\n\t\\\'' "\u00e9\x41\101" 'keep\q' }})");
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  EXPECT_EQ((*tokens)[1].value, "a\n\t\\'");
  EXPECT_EQ((*tokens)[2].value, "\xc3\xa9"
                                "AA");
  EXPECT_EQ((*tokens)[3].value, "keep\\q");
}

TEST(JinjaLexerTest, CountsLines) {
  Result<std::vector<Token>> tokens = Tokenize("a\nb\n{% if\nx %}\n{{ y }}");
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  EXPECT_EQ((*tokens)[1].line, 3);  // {%
  EXPECT_EQ((*tokens)[3].line, 4);  // x
  EXPECT_EQ((*tokens)[5].line, 5);  // {{ (trim_blocks ate the newline after %})
}

TEST(JinjaLexerTest, ReportsLexicalErrorsWithTheLine) {
  EXPECT_EQ(Tokenize("\n{{ 'open }}").message(), "line 2: unterminated string literal");
  EXPECT_EQ(Tokenize("a\n\n{# never closed").message(), "line 3: missing end of comment tag #}");
  EXPECT_EQ(Tokenize("{{ a ! b }}").message(), "line 1: unexpected character '!' in a tag");
  EXPECT_EQ(Tokenize("{{ (a] }}").message(), "line 1: unexpected ']', expected ')'");
  EXPECT_EQ(Tokenize("{% raw %}x").message(), "line 1: missing {% endraw %} for {% raw %}");
  EXPECT_EQ(Tokenize("{{ 99999999999999999999 }}").message(),
            "line 1: integer literal 99999999999999999999 is too large (64-bit integers only)");
}

// Expected strings below are what jinja2 3.1 renders with trim_blocks and lstrip_blocks.
TEST(JinjaLexerTest, WhitespaceControlMatchesJinja2) {
  EXPECT_EQ(RenderOrError("a\n  {% if true %}\n    b\n  {% endif %}\nc\n"), "a\n    b\nc");
  EXPECT_EQ(RenderOrError("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(RenderOrError("a\n  {%+ if true %}x{% endif %}\n"), "a\n  x");
  EXPECT_EQ(RenderOrError("a\n  {% if true +%}\nx{% endif %}\n"), "a\n\nx");
  EXPECT_EQ(RenderOrError("  {# comment #}\nx\n  {#- c2 -#}  y  {#+ c3 +#}\n z"), "xy  \n z");
  EXPECT_EQ(RenderOrError("{{- '  a  ' -}}\n\n{{ 'b' }}   \n{{- 'c' }}"), "  a  bc");
  EXPECT_EQ(RenderOrError("x\r\ny\r\n"), "x\ny");  // newlines normalized, one trailing dropped
}

TEST(JinjaLexerTest, RawBlocksAreText) {
  EXPECT_EQ(RenderOrError("{% raw %}{{ not }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw -%}|"
                          "{% raw %}\nA\n{% endraw %}\nB"),
            "{{ not }}|{% x %}|\nA\nB");
}

}  // namespace
}  // namespace gk::jinja
