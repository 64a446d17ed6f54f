// Rendering: statements, expressions, filters, tests and methods. Every expected string is what
// jinja2 3.1 renders under transformers' settings (checked with tests/chat_template/).
#include "formats/jinja/jinja.h"

#include <gtest/gtest.h>

#include "formats/jinja/jinja_test_util.h"

namespace gk::jinja {
namespace {

using testing::RenderOrError;

TEST(JinjaRenderTest, IfAndFor) {
  EXPECT_EQ(RenderOrError("{% if n > 2 %}big{% elif n > 1 %}mid{% else %}small{% endif %}", R"({"n": 2})"), "mid");
  EXPECT_EQ(RenderOrError("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                          "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
                          R"({"xs": ["a", "b"]})"),
            "1021TrueFalse2;2110FalseTrue2;");
  EXPECT_EQ(RenderOrError("{% for x in xs %}{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('o', 'e') }} {% endfor %}",
                          R"({"xs": [1, 2, 3]})"),
            "|2|o 1|3|e 2||o ");
  EXPECT_EQ(RenderOrError("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(RenderOrError("{% for i in [1,2,3,4] if i is even %}{{ loop.index }}/{{ loop.length }}{{ loop.last }} {% endfor %}"),
            "1/2False 2/2True ");
  EXPECT_EQ(RenderOrError("{% for i in [1,2,3,4,5] %}{% if i == 2 %}{% continue %}{% endif %}"
                          "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "13");
  EXPECT_EQ(RenderOrError("{% for i in [1,1,2,3,3] %}{% if loop.changed(i) %}{{ i }}{% endif %}{% endfor %}"), "123");
  EXPECT_EQ(RenderOrError("{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}{% for k, v in d.items() %}{{ k }}{% endfor %}",
                          R"({"d": {"b": 1, "a": 2}})"),
            "a=2;b=1;ba");
  EXPECT_EQ(RenderOrError("{% for c in 'h\xc3\xa9' %}{{ c }}-{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
                          R"({"d": {"z": 1, "a": 2}})"),
            "h-\xc3\xa9-za");
}

TEST(JinjaRenderTest, ScopingFollowsJinja2) {
  // A set inside a loop lives for one iteration; an if does not open a scope.
  EXPECT_EQ(RenderOrError("{% set x = 5 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "51525");
  EXPECT_EQ(RenderOrError("{% if true %}{% set q = 1 %}{% endif %}{{ q }}"), "1");
  // Namespaces carry state out of loops.
  EXPECT_EQ(RenderOrError("{% set ns = namespace(total=0, items=[]) %}{% for x in [1,2,3] %}{% set ns.total = ns.total + x %}"
                          "{% set ns.items = ns.items + [x * 2] %}{% endfor %}{{ ns.total }} {{ ns.items }}"),
            "6 [2, 4, 6]");
  EXPECT_EQ(RenderOrError("{% set x = 1 %}{% set x.a = 2 %}"),
            "ERROR: chat template line 1: cannot assign attribute on non-namespace object");
  // Macros see the template's (live) top level and their arguments, not their caller's locals.
  EXPECT_EQ(RenderOrError("{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{% set y = 2 %}{{ m() }}"), "12");
  EXPECT_EQ(RenderOrError("{% macro m() %}[{{ i }}]{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}"), "[]");
  EXPECT_EQ(RenderOrError("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, %}{{ t }}"), "12(1,)");
  EXPECT_EQ(RenderOrError("{% set block %}  inner {{ 'x' }} \n{% endset %}[{{ block }}]{% set up | upper | trim %} shout {% endset %}[{{ up }}]"),
            "[  inner x \n][SHOUT]");
  EXPECT_EQ(RenderOrError("{% with a = 1 %}{{ a }}{% set c = 3 %}{% endwith %}{{ a }}{{ c }}"), "1");
}

TEST(JinjaRenderTest, Macros) {
  const char* greet = "{% macro greet(name, greeting='Hello', punct='!') -%}{{ greeting }}, {{ name }}{{ punct }}{%- endmacro %}";
  EXPECT_EQ(RenderOrError(std::string(greet) + "{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(greeting='Hi', name='Cy') }}"),
            "Hello, Bob! Hello, Al? Hi, Cy!");
  EXPECT_EQ(RenderOrError("{% macro m(a, b=a~'!') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m() }}"), "11!|!");
  EXPECT_EQ(RenderOrError("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, c=3) }}"), "1(2,){'c': 3}");
  EXPECT_EQ(RenderOrError("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "ERROR: chat template line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(RenderOrError("{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}"),
            "ERROR: chat template line 1: macro 'm' takes no keyword argument 'a'");
  // Recursion and mutual recursion, including a call to a macro defined later.
  EXPECT_EQ(RenderOrError("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(10) }}"),
            "3628800");
  EXPECT_EQ(RenderOrError("{% macro a(n) %}{% if n > 0 %}{{ n }}{{ b(n-1) }}{% endif %}{% endmacro %}"
                          "{% macro b(n) %}<{{ a(n) }}>{% endmacro %}{{ a(3) }}"),
            "3<2<1<>>>");
}

TEST(JinjaRenderTest, PrintsValuesAsPython) {
  EXPECT_EQ(RenderOrError("{{ none }} {{ true }} {{ [1, 'a', none, true, 1.5, {'k': (1,)}] }} {{ (1, 2) }} {{ () }}"),
            "None True [1, 'a', None, True, 1.5, {'k': (1,)}] (1, 2) ()");
  EXPECT_EQ(RenderOrError("{{ 1e20 }} {{ 1e15 }} {{ 0.00001 }} {{ 100.0 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 4/2 }}"),
            "1e+20 1000000000000000.0 1e-05 100.0 0.30000000000000004 0.3333333333333333 2.0");
  EXPECT_EQ(RenderOrError("{{ x }}|{{ y }}|{{ z }}", R"({"x": 1.0, "y": 0.1, "z": 12345678901234})"), "1.0|0.1|12345678901234");
  EXPECT_EQ(RenderOrError("{{ d }} {{ d.keys() }} {{ range(3) }} {{ {'a': 1, 'a': 2} }} {{ \"it's\" ~ [\"it's\"] }}",
                          R"({"d": {"b": 1, "a": [2]}})"),
            "{'b': 1, 'a': [2]} dict_keys(['b', 'a']) range(0, 3) {'a': 2} it's[\"it's\"]");
}

TEST(JinjaRenderTest, PythonOperators) {
  EXPECT_EQ(RenderOrError("{{ -2 ** 2 }} {{ 2 ** -1 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7.5 % -2 }} {{ -7.5 // 2 }} {{ 10 % -3 }}"),
            "4 0.5 -4 2 -0.5 -4.0 -2");
  EXPECT_EQ(RenderOrError("{{ 'ab' * 3 }} {{ 2 * [0] }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ undefined_x }} {{ 'x' * -1 }}"),
            "ababab [0, 0] [1, 2] a1None ");
  EXPECT_EQ(RenderOrError("{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 2 in [1, 2] }}{{ 'st' in 'str' }}{{ 'a' in {'a': 1} }}"
                          "{{ 9 not in [1] }}{{ 1 == 1.0 == true }}{{ (1, 2) == [1, 2] }}{{ [1, 2] < [1, 3] }}"),
            "TrueFalseTrueTrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(RenderOrError("{{ 1 and 2 }}{{ 0 and 2 }}{{ 0 or 'x' }}{{ none or [] }}{{ not 0 }}{{ 1 if false }}|{{ 'a' if 0 else 'b' }}"),
            "20x[]True|b");
  EXPECT_EQ(RenderOrError("{{ '%s-%d-%5.2f|%-4s|%03d|%x|%(k)s' % ('a', 3.9, 3.14159, 'x', 7, 255, 1) }}"),
            "ERROR: chat template line 1: format requires a mapping");
  EXPECT_EQ(RenderOrError("{{ '%s-%d-%5.2f|%-4s|%03d|%x' % ('a', 3.9, 3.14159, 'x', 7, 255) }} {{ '%(n)s!' % {'n': 1} }}"),
            "a-3- 3.14|x   |007|ff 1!");
  EXPECT_EQ(RenderOrError("{{ xs[0] }}{{ xs[-1] }}{{ xs[9] }}{{ xs[1:3] }}{{ xs[::-1] }}{{ xs[5:1:-2] }}{{ s[1:] }}{{ s[::-1] }}{{ xs.0 }}",
                          R"({"xs": [1, 2, 3, 4, 5], "s": "h\u00e9llo"})"),
            "15[2, 3][5, 4, 3, 2, 1][5, 3]\xc3\xa9llooll\xc3\xa9h1");
}

TEST(JinjaRenderTest, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(RenderOrError("[{{ nope }}|{{ nope | length }}|{{ nope | list }}|{{ nope is defined }}|{{ 'x' in nope }}"
                          "|{% for x in nope %}x{% endfor %}|{{ nope | default('d') }}|{{ none.attr }}|{{ d.missing }}]",
                          R"({"d": {}})"),
            "[|0|[]|False|False||d||]");
  EXPECT_EQ(RenderOrError("{{ nope.attr }}"), "ERROR: chat template line 1: 'nope' is undefined");
  EXPECT_EQ(RenderOrError("\n{{ d.missing.deeper }}", R"({"d": {}})"),
            "ERROR: chat template line 2: 'dict object' has no attribute 'missing'");
  EXPECT_EQ(RenderOrError("{{ nope + 1 }}"), "ERROR: chat template line 1: 'nope' is undefined");
  EXPECT_EQ(RenderOrError("{{ nope() }}"), "ERROR: chat template line 1: 'nope' is undefined");
  EXPECT_EQ(RenderOrError("{{ xs[3]['a'] }}", R"({"xs": []})"), "ERROR: chat template line 1: list object has no element 3");
}

TEST(JinjaRenderTest, RenderErrorsCarryTheLine) {
  EXPECT_EQ(RenderOrError("a\nb\n{{ raise_exception('Roles must alternate') }}"),
            "ERROR: chat template line 3: Roles must alternate");
  EXPECT_EQ(RenderOrError("{{ 'a' + 1 }}"), "ERROR: chat template line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(RenderOrError("{{ 1 < 'a' }}"), "ERROR: chat template line 1: '<' not supported between instances of 'int' and 'str'");
  EXPECT_EQ(RenderOrError("{{ 1 // 0 }}"), "ERROR: chat template line 1: integer division or modulo by zero");
  EXPECT_EQ(RenderOrError("{{ [1].append(2) }}"),
            "ERROR: chat template line 1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(RenderOrError("{% for a, b in [(1, 2, 3)] %}{% endfor %}"),
            "ERROR: chat template line 1: too many values to unpack (expected 2)");
  EXPECT_EQ(RenderOrError("{{ x | tojson }}"), "ERROR: chat template line 1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(RenderOrError("{{ 2 ** 64 }}"), "ERROR: chat template line 1: integer overflow in ** (64-bit integers only)");
  EXPECT_EQ(RenderOrError("[1]"), "[1]");
  EXPECT_EQ(RenderOrError("{{ x }}", "[1]"), "ERROR: chat template: the render context must be a JSON object, got array");
}

}  // namespace
}  // namespace gk::jinja
