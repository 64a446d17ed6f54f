// jinja2's tests (`x is defined`, `n is divisibleby 3`), with Python's notion of each type:
// bool counts as a number, a dict and an Undefined count as sequences, as in jinja2.
#include <algorithm>
#include <cmath>
#include <utility>

#include "formats/jinja/builtins.h"
#include "formats/jinja/operators.h"
#include "formats/jinja/py_str.h"

namespace gk::jinja {
namespace {

Result<Value> Only(const CallArgs& args, std::string_view name) {
  GK_ASSIGN_OR_RETURN(auto bound, BindArgs(args, name, {"other"}, 1));
  return *bound[0];
}

Status NoArgs(const CallArgs& args, std::string_view name) {
  GK_ASSIGN_OR_RETURN(auto bound, BindArgs(args, name, {}, 0));
  return Status::Ok();
}

#define GK_SIMPLE_TEST(fn_name, test_name, expr)                                 \
  Result<bool> fn_name(const Value& v, const CallArgs& args, BuiltinContext&) { \
    GK_RETURN_IF_ERROR(NoArgs(args, test_name));                                 \
    return (expr);                                                               \
  }

GK_SIMPLE_TEST(TestDefined, "defined", !v.is_undefined())
GK_SIMPLE_TEST(TestUndefined, "undefined", v.is_undefined())
GK_SIMPLE_TEST(TestNone, "none", v.is_none())
GK_SIMPLE_TEST(TestBoolean, "boolean", v.kind() == Kind::kBool)
GK_SIMPLE_TEST(TestTrue, "true", v.kind() == Kind::kBool && v.bool_value())
GK_SIMPLE_TEST(TestFalse, "false", v.kind() == Kind::kBool && !v.bool_value())
GK_SIMPLE_TEST(TestInteger, "integer", v.kind() == Kind::kInt)
GK_SIMPLE_TEST(TestFloat, "float", v.kind() == Kind::kFloat)
GK_SIMPLE_TEST(TestNumber, "number", v.is_number())
GK_SIMPLE_TEST(TestString, "string", v.is_string())
GK_SIMPLE_TEST(TestMapping, "mapping", v.kind() == Kind::kDict)
GK_SIMPLE_TEST(TestEscaped, "escaped", false)
GK_SIMPLE_TEST(TestCallable, "callable",
               v.kind() == Kind::kCallable || v.is_undefined() || v.kind() == Kind::kLoop)
// len() and __getitem__: str, list, tuple, range, dict and (oddly) Undefined.
GK_SIMPLE_TEST(TestSequence, "sequence",
               v.is_string() || v.is_undefined() || v.kind() == Kind::kDict ||
                   (v.kind() == Kind::kList && (v.list().kind == ListKind::kList ||
                                                v.list().kind == ListKind::kTuple ||
                                                v.list().kind == ListKind::kRange)))
GK_SIMPLE_TEST(TestIterable, "iterable",
               v.is_string() || v.is_undefined() || v.kind() == Kind::kDict || v.kind() == Kind::kList ||
                   v.kind() == Kind::kLoop)
GK_SIMPLE_TEST(TestLower, "lower", py::IsLower(ToText(v).bytes()))
GK_SIMPLE_TEST(TestUpper, "upper", py::IsUpper(ToText(v).bytes()))
GK_SIMPLE_TEST(TestFilter, "filter", v.is_string() && FindFilter(v.text().bytes()) != nullptr)
GK_SIMPLE_TEST(TestTest, "test", v.is_string() && FindTest(v.text().bytes()) != nullptr)
#undef GK_SIMPLE_TEST

Result<bool> ModuloIs(const Value& v, const Value& divisor, int64_t remainder) {
  GK_ASSIGN_OR_RETURN(Value mod, Arithmetic(Op::kMod, v, divisor, 0));
  return Equals(mod, Value::Int(remainder, true));
}

Result<bool> TestOdd(const Value& v, const CallArgs& args, BuiltinContext&) {
  GK_RETURN_IF_ERROR(NoArgs(args, "odd"));
  return ModuloIs(v, Value::Int(2, true), 1);
}

Result<bool> TestEven(const Value& v, const CallArgs& args, BuiltinContext&) {
  GK_RETURN_IF_ERROR(NoArgs(args, "even"));
  return ModuloIs(v, Value::Int(2, true), 0);
}

Result<bool> TestDivisibleBy(const Value& v, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Value num, Only(args, "divisibleby"));
  return ModuloIs(v, num, 0);
}

Result<bool> TestIn(const Value& v, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Value seq, Only(args, "in"));
  return Contains(seq, v);
}

// `is sameas`: identity. Containers by object, scalars by type and value (Python caches those).
Result<bool> TestSameAs(const Value& v, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Value other, Only(args, "sameas"));
  if (v.kind() != other.kind()) return false;
  if (v.kind() == Kind::kList) return &v.list() == &other.list();
  if (v.kind() == Kind::kDict) return &v.dict() == &other.dict();
  return Equals(v, other);
}

template <Op kOp>
Result<bool> TestCompare(const Value& v, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Value other, Only(args, "comparison test"));
  return CompareValues(kOp, v, other);
}

const std::pair<std::string_view, TestFn> kTests[] = {
    {"defined", TestDefined},     {"undefined", TestUndefined},   {"none", TestNone},
    {"boolean", TestBoolean},     {"true", TestTrue},             {"false", TestFalse},
    {"integer", TestInteger},     {"float", TestFloat},           {"number", TestNumber},
    {"string", TestString},       {"mapping", TestMapping},       {"sequence", TestSequence},
    {"iterable", TestIterable},   {"callable", TestCallable},     {"escaped", TestEscaped},
    {"lower", TestLower},         {"upper", TestUpper},           {"odd", TestOdd},
    {"even", TestEven},           {"divisibleby", TestDivisibleBy}, {"in", TestIn},
    {"sameas", TestSameAs},       {"filter", TestFilter},         {"test", TestTest},
    {"eq", TestCompare<Op::kEq>}, {"equalto", TestCompare<Op::kEq>}, {"==", TestCompare<Op::kEq>},
    {"ne", TestCompare<Op::kNe>}, {"!=", TestCompare<Op::kNe>},   {"lt", TestCompare<Op::kLt>},
    {"lessthan", TestCompare<Op::kLt>}, {"<", TestCompare<Op::kLt>}, {"le", TestCompare<Op::kLe>},
    {"<=", TestCompare<Op::kLe>}, {"gt", TestCompare<Op::kGt>},   {"greaterthan", TestCompare<Op::kGt>},
    {">", TestCompare<Op::kGt>},  {"ge", TestCompare<Op::kGe>},   {">=", TestCompare<Op::kGe>},
};

}  // namespace

TestFn FindTest(std::string_view name) {
  for (const auto& [test_name, fn] : kTests) {
    if (test_name == name) return fn;
  }
  return nullptr;
}

bool IsJinjaTest(std::string_view name) { return FindTest(name) != nullptr; }

}  // namespace gk::jinja
