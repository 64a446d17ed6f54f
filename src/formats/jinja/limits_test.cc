// Hostile templates and contexts end in an error, never a crash or a hang; templates are safe to
// render from several threads at once.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "formats/jinja/jinja.h"
#include "formats/jinja/jinja_test_util.h"

namespace gk::jinja {
namespace {

using testing::RenderOrError;

TEST(JinjaLimitsTest, RecursionIsBounded) {
  EXPECT_EQ(RenderOrError("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"),
            "ERROR: chat template line 1: macro 'm' nested deeper than 100 calls (endless recursion?)");
  EXPECT_EQ(RenderOrError("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
            "ERROR: chat template line 1: macro 'a' nested deeper than 100 calls (endless recursion?)");
  RenderOptions deep;
  deep.limits.max_call_depth = 100000;  // the nesting bound still holds
  const std::string result = RenderOrError(
      "{% macro m(n) %}{% if n %}{% for x in [1] %}{% if true %}{{ m(n - 1) }}{% endif %}{% endfor %}{% endif %}{% endmacro %}{{ m(100000) }}",
      "{}", deep);
  EXPECT_NE(result.find("the template nests deeper than"), std::string::npos) << result;
}

TEST(JinjaLimitsTest, LoopsAndOutputAreBounded) {
  RenderOptions options;
  options.limits.max_steps = 100000;
  EXPECT_EQ(RenderOrError("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", options),
            "ERROR: chat template line 1: the template ran for more than 100000 steps (an endless loop?)");
  options.limits.max_output_bytes = 1000;
  EXPECT_EQ(RenderOrError("{% for i in range(1000) %}xx{% endfor %}", "{}", options),
            "ERROR: chat template line 1: the output exceeds the render limit of 1000 bytes");
  EXPECT_EQ(RenderOrError("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                          "{}", options),
            "ERROR: chat template line 1: a string exceeds the render limit of 1000 bytes");
  EXPECT_EQ(RenderOrError("{{ 'x' * 100000 }}", "{}", options),
            "ERROR: chat template line 1: a result of 100000 bytes/items exceeds the render limit of 1000");
}

// Work the step count does not see stays linear in the data (found by fuzz/jinja_template_fuzz):
// '' * n looped n times, and substring search compared at every position (n·m: 800,000 positions
// × 200,000 bytes here), so these took seconds to hours before. The results are Python's.
TEST(JinjaLimitsTest, RepeatingNothingAndSearchingAreLinear) {
  EXPECT_EQ(RenderOrError("[{{ '' * 9000000000000000000 }}]{{ [] * 9000000000000000000 }}"), "[][]");
  const std::string hay = "{% set hay = 'a' * 1000000 %}{% set needle = 'a' * 200000 ~ 'b' %}";
  EXPECT_EQ(RenderOrError(hay + "{{ needle in hay }}{{ hay.find(needle) }}{{ hay.rfind(needle) }}{{ hay.count(needle) }}"
                                "{{ hay.split(needle) | length }}{{ hay.rsplit(needle) | length }}"
                                "{{ hay.replace(needle, '') | length }}"),
            "False-1-1011" "1000000");
  EXPECT_EQ(RenderOrError(hay + "{{ (hay ~ 'b').find(needle) }} {{ ('b' ~ hay).rfind('b' ~ needle[:-2]) }}"),
            "800000 0");
}

// A step may scan many MB (indexing a long string by code point, `in` over a long list, a select
// whose test scans a list), so the step count alone does not bound the time: the clock does.
TEST(JinjaLimitsTest, TheClockBoundsWhatStepsCannotSee) {
  RenderOptions options;
  options.limits.max_seconds = 0.25;
  EXPECT_EQ(RenderOrError("{% set s = 'ä' * 1000000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}", "{}", options),
            "ERROR: chat template line 1: the template ran for more than 0.25 s");
  EXPECT_EQ(RenderOrError("{% set l = range(100000) | list %}{{ l | select('in', l) | list | length }}", "{}", options),
            "ERROR: chat template line 1: the template ran for more than 0.25 s");
}

// The searches' edge cases, as Python gives them.
TEST(JinjaLimitsTest, SearchesMatchPython) {
  EXPECT_EQ(RenderOrError("{{ 'abcabc'.find('') }}{{ 'abcabc'.rfind('') }}{{ 'abcabc'.rfind('bc') }}{{ 'abcabc'.rfind('x') }}"
                          "{{ 'abc'.rfind('abcd') }}{{ 'äbä'.rfind('ä') }}{{ 'abcabc'.find('c', 3) }}{{ 'abcabc'.rfind('a', 0, 3) }}"),
            "064-1-1250");
  EXPECT_EQ(RenderOrError("{{ 'a,b,,c'.rsplit(',') }}{{ 'a,b,,c'.rsplit(',', 2) }}{{ ',a,'.rsplit(',') }}{{ 'aaa'.rsplit('aa') }}"
                          "{{ 'aaa'.split('aa') }}{{ 'aaaa'.count('aa') }}{{ 'aaa'.replace('aa', 'b') }}{{ '' in 'a' }}"),
            "['a', 'b', '', 'c']['a,b', '', 'c']['', 'a', '']['a', '']['', 'a']2baTrue");
}

TEST(JinjaLimitsTest, DeepValuesAreRefused) {
  EXPECT_EQ(RenderOrError("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}"),
            "ERROR: chat template line 1: values nested deeper than 256 levels");
  std::string deep_json = std::string(300, '[') + std::string(300, ']');
  EXPECT_EQ(RenderOrError("{{ x }}", "{\"x\": " + deep_json + "}"),
            "ERROR: chat template: context key 'x': the context is nested deeper than 256 levels");
  // A namespace that contains itself prints like Python's recursive repr.
  EXPECT_EQ(RenderOrError("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'me': <Namespace {...}>}>");
}

TEST(JinjaLimitsTest, RendersConcurrently) {
  Result<Template> parsed = Template::Parse(
      "{% macro q(v) %}<{{ v }}>{% endmacro %}{% set ns = namespace(n=0) %}"
      "{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ q(m.content | upper) }}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  const Template shared = *parsed;  // copies share the parsed tree
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      nlohmann::ordered_json context;
      for (int i = 0; i <= t; ++i) context["messages"].push_back({{"content", "m" + std::to_string(i)}});
      for (int rep = 0; rep < 200; ++rep) {
        Result<std::vector<Span>> spans = shared.Render(context);
        results[t] = spans.ok() ? JoinSpans(*spans) : spans.message();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(results[0], "<M0>1");
  EXPECT_EQ(results[2], "<M0><M1><M2>3");
  EXPECT_EQ(results[7], "<M0><M1><M2><M3><M4><M5><M6><M7>8");
}

// Random mutations of a real chat template: each parses or fails cleanly, and each render ends
// (in text or an error) within the step limit. Under a sanitizer this is a small fuzzer.
TEST(JinjaLimitsTest, MutatedTemplatesNeverCrash) {
  std::string seed;
  std::ifstream in(std::string(GK_SOURCE_DIR) + "/../shared/fixtures/chat-templates/gemma-4-31B-it.jinja");
  if (in) {
    std::stringstream buffer;
    buffer << in.rdbuf();
    seed = buffer.str();
  } else {
    seed = "{% macro f(a, b=[]) %}{% for k, v in a | dictsort %}{{ k }}:{{ v | tojson }}{% if not loop.last %},"
           "{% endif %}{% endfor %}{% endmacro %}{% set ns = namespace(x=none) %}{% for m in messages if m.role %}"
           "<|turn>{{ m['role'] }}\n{{ m.content | trim }}{{ f(m) }}<turn|>\n{% endfor %}";
  }
  const auto context = nlohmann::ordered_json::parse(R"({"bos_token": "<bos>", "add_generation_prompt": true,
      "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object",
        "properties": {"a": {"type": "string", "enum": ["x"]}}, "required": ["a"]}}}],
      "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                   {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
                   {"role": "tool", "content": "r"}]})");
  const char* pieces[] = {"{%", "%}", "{{", "}}", "(", ")", "[", "]", "|", "loop", "macro", "for", "endfor",
                          "if", "endif", "'", "\\", "-", "**", "~", ".", ",", "ns", "set", "raw", "\n", "\xff",
                          "range(100000)", "[::-1]", "9999999999999999999", " is ", " not ", "%"};
  std::mt19937_64 rng(20250101);
  RenderOptions options;
  options.limits.max_steps = 200000;
  options.limits.max_output_bytes = 1 << 20;
  int parsed = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    std::string source = seed;
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) {
      const size_t pos = rng() % (source.size() + 1);
      switch (rng() % 3) {
        case 0: source.insert(pos, pieces[rng() % std::size(pieces)]); break;
        case 1: source.erase(pos, 1 + rng() % 40); break;
        default: source.insert(pos, source.substr(rng() % source.size(), rng() % 200)); break;
      }
    }
    Result<Template> t = Template::Parse(source);
    if (!t.ok()) continue;
    ++parsed;
    (void)t->Render(context, options);
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace gk::jinja
