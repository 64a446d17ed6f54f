// Filters, tests, methods and globals; every expected string is what jinja2 3.1 renders under
// transformers' settings (tojson as transformers overrides it).
#include <gtest/gtest.h>

#include "formats/jinja/jinja_test_util.h"

namespace gk::jinja {
namespace {

using testing::RenderOrError;

constexpr const char* kUsers = R"({"users": [{"name": "bob", "age": 30, "tags": ["a"]}, {"name": "Alice", "age": 25},
                                             {"name": "carl", "age": 30}], "xs": [3, 1, 2], "d": {"b": 2, "a": 1, "C": 0}})";

TEST(JinjaBuiltinsTest, StringFilters) {
  EXPECT_EQ(RenderOrError("{{ '  x  ' | trim }}|{{ '--x--' | trim('-') }}|{{ 'hello world-foo' | title }}|"
                          "{{ 'hELLO' | capitalize }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'aXa' | replace('a', 'b') }}|"
                          "{{ 'aaa' | replace('a', 'b', 2) }}|{{ 5 | string }}|{{ '<a>&\"' | e }}|{{ 'x' | safe }}"),
            "x|x|Hello World-Foo|Hello|ABab|bXb|bba|5|&lt;a&gt;&amp;&#34;|x");
  EXPECT_EQ(RenderOrError("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nc' | indent('>', blank=true) }}"),
            "a\n    b\n\n    c|  a\n  b|a\n>\n>c");
}

TEST(JinjaBuiltinsTest, NumberFilters) {
  EXPECT_EQ(RenderOrError("{{ '12' | int }} {{ '1.5' | int }} {{ 'x' | int }} {{ 'x' | int(-1) }} {{ 1.9 | int }} {{ '0x1A' | int(base=16) }} "
                          "{{ '3.5' | float }} {{ 'inf' | float }} {{ none | int }} {{ -5 | abs }} {{ -2.5 | abs }}"),
            "12 1 0 -1 1 26 3.5 inf 0 5 2.5");
  EXPECT_EQ(RenderOrError("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.567 | round(1, 'floor') }} "
                          "{{ 2.521 | round(1, 'ceil') }} {{ 7 | round }} {{ 12345 | round(-2) }}"),
            "2.0 4.0 2.67 2.5 2.6 7 12300");
}

TEST(JinjaBuiltinsTest, SequenceFilters) {
  EXPECT_EQ(RenderOrError("{{ xs | first }}{{ xs | last }}{{ xs | length }}{{ xs | count }}{{ xs | sum }}{{ xs | min }}{{ xs | max }}"
                          "{{ xs | sort }}{{ xs | sort(reverse=true) }}{{ xs | reverse | list }}{{ xs | join('-') }}{{ [] | first }}",
                          kUsers),
            "3233613[1, 2, 3][3, 2, 1][2, 1, 3]3-1-2");
  EXPECT_EQ(RenderOrError("{{ d | dictsort }}{{ d | dictsort(case_sensitive=true) }}{{ d | dictsort(by='value', reverse=true) }}"
                          "{{ d | items | list }}{{ d | list }}",
                          kUsers),
            "[('a', 1), ('b', 2), ('C', 0)][('C', 0), ('a', 1), ('b', 2)][('b', 2), ('a', 1), ('C', 0)]"
            "[('b', 2), ('a', 1), ('C', 0)]['b', 'a', 'C']");
  EXPECT_EQ(RenderOrError("{{ users | map(attribute='name') | list }}{{ users | map(attribute='tags.0', default='none') | list }}"
                          "{{ xs | map('string') | join }}{{ ['a', 'b'] | map('upper') | list }}",
                          kUsers),
            "['bob', 'Alice', 'carl']['a', 'n', 'n']312['A', 'B']");
  EXPECT_EQ(RenderOrError("{{ users | selectattr('age', 'equalto', 30) | map(attribute='name') | join(',') }}|"
                          "{{ users | rejectattr('tags') | map(attribute='name') | join(',') }}|{{ xs | select('odd') | list }}|"
                          "{{ xs | reject('odd') | list }}|{{ [0, 1, '', none, 'x'] | select | list }}",
                          kUsers),
            "bob,carl|Alice,carl|[3, 1]|[2]|[1, 'x']");
  EXPECT_EQ(RenderOrError("{{ users | sort(attribute='name') | map(attribute='name') | join(',') }}|"
                          "{{ users | sort(attribute='age,name') | map(attribute='name') | join(',') }}|"
                          "{{ ['b', 'a', 'B', 'A'] | unique | list }}|{{ users | max(attribute='age') }}|{{ users | sum(attribute='age') }}",
                          kUsers),
            "Alice,bob,carl|Alice,bob,carl|['b', 'a']|{'name': 'bob', 'age': 30, 'tags': ['a']}|85");
  // Like jinja2, map/select give generators: always true, no len().
  EXPECT_EQ(RenderOrError("{% if [] | select %}T{% endif %}{{ xs | select('odd') | length }}", kUsers),
            "ERROR: chat template line 1: object of type 'generator' has no len()");
}

TEST(JinjaBuiltinsTest, ToJsonMatchesTransformers) {
  EXPECT_EQ(RenderOrError("{{ x | tojson }}", R"({"x": [1.0, 1e20, -0.0, 0.1, null, true, {"a": [1, {}], "b": []}, "\u00e9\"\n<>&"]})"),
            "[1.0, 1e+20, -0.0, 0.1, null, true, {\"a\": [1, {}], \"b\": []}, \"\xc3\xa9\\\"\\n<>&\"]");
  EXPECT_EQ(RenderOrError("{{ {'b': 1, 'a': {'d': 2, 'c': 3}} | tojson(sort_keys=true) }}{{ {'a': [1, 2]} | tojson(indent=2) }}"
                          "{{ {'a': 1} | tojson(separators=(',', '=')) }}{{ '\xc3\xa9\xf0\x9f\x98\x80' | tojson(ensure_ascii=true) }}"
                          "{{ {1: 'x', 2.5: 'y', true: 'z', none: 'n'} | tojson }}"),
            "{\"a\": {\"c\": 3, \"d\": 2}, \"b\": 1}{\n  \"a\": [\n    1,\n    2\n  ]\n}{\"a\"=1}\"\\u00e9\\ud83d\\ude00\""
            "{\"1\": \"z\", \"2.5\": \"y\", \"null\": \"n\"}");
}

TEST(JinjaBuiltinsTest, Tests) {
  EXPECT_EQ(RenderOrError("{{ xs is defined }}{{ nope is undefined }}{{ none is none }}{{ true is number }}{{ true is integer }}"
                          "{{ 1.0 is float }}{{ 'x' is string }}{{ d is mapping }}{{ d is sequence }}{{ nope is sequence }}"
                          "{{ xs is iterable }}{{ 5 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in xs }}"
                          "{{ 'a' is lower }}{{ 'A' is upper }}{{ true is true }}{{ false is boolean }}{{ 1 is eq 1 }}"
                          "{{ 3 is gt 2 }}{{ xs is not none }}{{ 'trim' is filter }}{{ d.get is callable }}",
                          kUsers),
            "TrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(JinjaBuiltinsTest, MethodsOfStrDictList) {
  EXPECT_EQ(RenderOrError("{{ s.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(None, 1) }}{{ 'a,b,c'.rsplit(',', 1) }}"
                          "{{ s.strip('Hd') }}{{ s.startswith('Hell') }}{{ s.startswith(('x', 'He')) }}{{ s.endswith('ld') }}"
                          "{{ s.find('o') }}{{ s.count('l') }}{{ s.upper() }}{{ s.replace('l', 'L', 1) }}{{ '-'.join(['a', 'b']) }}"
                          "{{ 'x\\ny'.splitlines() }}{{ s.lower().title() }}{{ 'ab'.removeprefix('a') }}",
                          R"({"s": "Hello, World"})"),
            "['Hello', ' World']['a', 'b']['a', 'b c']['a,b', 'c']ello, WorlTrueTrueTrue43HELLO, WORLDHeLlo, Worlda-b"
            "['x', 'y']Hello, Worldb");
  EXPECT_EQ(RenderOrError("{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}{{ d.items() }}{{ d.values() | list }}"
                          "{{ xs.index(1) }}{{ xs.count(3) }}",
                          kUsers),
            "1None5dict_items([('b', 2), ('a', 1), ('C', 0)])[2, 1, 0]11");
  EXPECT_EQ(RenderOrError("{{ 'abc'.format(1) }}"),
            "ERROR: chat template line 1: str.format() is not supported by this template engine");
}

TEST(JinjaBuiltinsTest, Globals) {
  EXPECT_EQ(RenderOrError("{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}{{ dict(a=1) }}{{ namespace(x=1).x }}"),
            "[1, 4, 7][5, 3, 1]{'a': 1}1");
  EXPECT_EQ(RenderOrError("{{ range(100001) | length }}"),
            "ERROR: chat template line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(RenderOrError("{{ strftime_now('%%') }}"), "%");
  EXPECT_EQ(RenderOrError("{% set range = 'mine' %}{{ range }}"), "mine");
}

// Arguments Python itself refuses inside jinja2's builtins (found by running the fuzz corpus of
// fuzz/jinja_template_fuzz through both engines): the engine must fail where jinja2 raises.
TEST(JinjaBuiltinsTest, ArgumentsPythonRefusesAreRefused) {
  EXPECT_EQ(RenderOrError("{{ dict(u) }}"), "ERROR: chat template line 1: 'u' is undefined");
  EXPECT_EQ(RenderOrError("{{ namespace(u) }}"), "ERROR: chat template line 1: 'u' is undefined");
  EXPECT_EQ(RenderOrError("{{ dict(u, a=1) }}"), "ERROR: chat template line 1: 'u' is undefined");
  EXPECT_EQ(RenderOrError("{{ [2, 1] | sort(u) }}"),
            "ERROR: chat template line 1: 'Undefined' object cannot be interpreted as an integer");
  EXPECT_EQ(RenderOrError("{{ [2, 1] | sort(none) }}"),
            "ERROR: chat template line 1: 'NoneType' object cannot be interpreted as an integer");
  EXPECT_EQ(RenderOrError("{{ {'b': 1, 'a': 2} | dictsort(reverse='yes') }}"),
            "ERROR: chat template line 1: 'str' object cannot be interpreted as an integer");
  EXPECT_EQ(RenderOrError("{{ 'ab' | trim(u) }}"), "ERROR: chat template line 1: strip arg must be None or str");
  EXPECT_EQ(RenderOrError("{{ 'ab' | trim(1) }}"), "ERROR: chat template line 1: strip arg must be None or str");
  // What Python accepts still renders: an int or a bool as reverse, None as the characters.
  EXPECT_EQ(RenderOrError("{{ [1, 2] | sort(1) }}{{ [1, 2] | sort(reverse=true) }}{{ ' a ' | trim(none) }}"),
            "[2, 1][2, 1]a");
}

}  // namespace
}  // namespace gk::jinja
