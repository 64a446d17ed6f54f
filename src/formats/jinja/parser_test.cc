// Load-time checks: everything the engine cannot render is refused by Template::Parse, with the
// line, before any conversation is seen.
#include "formats/jinja/parser.h"

#include <gtest/gtest.h>

#include "formats/jinja/jinja.h"

namespace gk::jinja {
namespace {

std::string ParseError(std::string_view source) {
  Result<Template> parsed = Template::Parse(source);
  return parsed.ok() ? "parsed" : parsed.message();
}

TEST(JinjaParserTest, UnknownAndUnsupportedFiltersFailAtLoad) {
  EXPECT_EQ(ParseError("a\n\n{{ x | xmlattr }}"), "chat template line 3: filter 'xmlattr' is not supported");
  EXPECT_EQ(ParseError("{% if false %}{{ x | frobnicate }}{% endif %}"),
            "chat template line 1: unknown filter 'frobnicate'");
  EXPECT_EQ(ParseError("{{ xs | map('nope') }}"), "chat template line 1: unknown filter 'nope' in map()");
  EXPECT_EQ(ParseError("{{ x is prime }}"), "chat template line 1: unknown test 'prime'");
  EXPECT_EQ(ParseError("{{ xs | selectattr('a', 'prime') }}"), "chat template line 1: unknown test 'prime' in selectattr()");
}

TEST(JinjaParserTest, UnsupportedAndUnknownTagsFailAtLoad) {
  EXPECT_EQ(ParseError("x\ny\n{% include 'other.jinja' %}"), "chat template line 3: {% include %} is not supported");
  EXPECT_EQ(ParseError("{% extends 'base' %}"), "chat template line 1: {% extends %} is not supported");
  EXPECT_EQ(ParseError("{% filter upper %}x{% endfilter %}"), "chat template line 1: {% filter %} is not supported");
  EXPECT_EQ(ParseError("{% call m() %}x{% endcall %}"), "chat template line 1: {% call %} is not supported");
  EXPECT_EQ(ParseError("{% frob %}"), "chat template line 1: unknown tag 'frob'");
  EXPECT_EQ(ParseError("{% for x in xs recursive %}{% endfor %}"),
            "chat template line 1: recursive for loops are not supported");
}

TEST(JinjaParserTest, UnbalancedBlocksFailAtLoad) {
  EXPECT_EQ(ParseError("{% for x in xs %}\n{% if x %}\n{% endfor %}"),
            "chat template line 3: unexpected {% endfor %} (the innermost open block is {% if %} from line 2)");
  EXPECT_EQ(ParseError("text\n{% if a %}\nno end"),
            "chat template line 2: {% if %} is never closed (expected {% endif %} before the end of the template)");
  EXPECT_EQ(ParseError("{% endif %}"), "chat template line 1: unexpected {% endif %} (no block is open)");
  EXPECT_EQ(ParseError("{% macro m() %}{% set x %}"),
            "chat template line 1: {% set %} is never closed (expected {% endset %} before the end of the template)");
  EXPECT_EQ(ParseError("{{ x "), "chat template line 1: expected '}}', got end of template");
}

TEST(JinjaParserTest, LoopControlsOnlyInsideLoops) {
  EXPECT_EQ(ParseError("{% break %}"), "chat template line 1: {% break %} outside a for loop");
  EXPECT_EQ(ParseError("{% for x in xs %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}"),
            "chat template line 1: {% continue %} outside a for loop");
  EXPECT_EQ(ParseError("{% for x in xs %}{% else %}{% break %}{% endfor %}"),
            "chat template line 1: {% break %} outside a for loop");
  EXPECT_EQ(ParseError("{% for x in xs %}{% if x %}{% break %}{% endif %}{% endfor %}"), "parsed");
}

TEST(JinjaParserTest, SyntaxErrors) {
  EXPECT_EQ(ParseError("{{ }}"), "chat template line 1: expected an expression, got end of print statement '}}'");
  EXPECT_EQ(ParseError("{% set true = 1 %}"), "chat template line 1: cannot assign to 'true'");
  EXPECT_EQ(ParseError("{% macro m(a=1, b) %}{% endmacro %}"),
            "chat template line 1: non-default argument follows default argument");
  EXPECT_EQ(ParseError("{{ f(a=1, 2) }}"), "chat template line 1: positional argument follows keyword argument");
  EXPECT_EQ(ParseError("{{ x is defined is defined }}"), "chat template line 1: you cannot chain multiple tests with 'is'");
}

TEST(JinjaParserTest, NestingIsBounded) {
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(ParseError(parens), "chat template line 1: expression nested deeper than 200 levels");
  std::string filters = "{{ x";
  for (int i = 0; i < 5000; ++i) filters += "|trim";
  EXPECT_EQ(ParseError(filters + " }}"), "chat template line 1: expression nested deeper than 200 levels");
  std::string nots = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "not ";
    return s;
  }() + "x }}";
  EXPECT_EQ(ParseError(nots), "chat template line 1: expression nested deeper than 200 levels");
  std::string blocks;
  for (int i = 0; i < 300; ++i) blocks += "{% if x %}";
  EXPECT_EQ(ParseError(blocks), "chat template line 1: blocks nested deeper than 100 levels");
}

TEST(JinjaParserTest, AcceptsTheConstructsChatTemplatesUse) {
  EXPECT_EQ(ParseError(R"(
{%- macro f(a, b=[], c={'k': (1, 2)}) -%}{{ a ~ b | length }}{%- endmacro -%}
{%- set ns = namespace(x=None) -%}{%- set ns.x = 1 -%}
{%- for k, v in d | dictsort if v is not none -%}{{ loop.index }}{% else %}-{% endfor -%}
{%- set block | trim %} x {% endset -%}
{%- with a = 1 %}{{ a }}{% endwith -%}
{%- generation %}g{% endgeneration -%}
{{ x[1:] ~ x[::-1] ~ x.y['z'](1, k=2) if a and not b or c in d else e is divisibleby 3 }}
{{ -2 ** 2 }}{{ 'a' 'b' }}{% print x, y %}
)"),
            "parsed");
}

}  // namespace
}  // namespace gk::jinja
