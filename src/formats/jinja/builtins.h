// The functions a template calls by name: filters (x | trim), tests (x is string), methods on
// values (s.split(','), d.items()) and globals (range, namespace, raise_exception ...). Each
// group lives in its own file (filters.cc, tests.cc, methods.cc, globals.cc); this header is how
// the parser resolves filter and test names at load time and how the renderer calls them all.
//
// Builtins are pure functions of their arguments; errors carry no line (the renderer adds it).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/jinja/value.h"

namespace gk::jinja {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// What builtins need from the render in progress.
struct BuiltinContext {
  size_t max_string_bytes;   // refuse building longer strings (and lists) than this
  NamespaceArena* arena;     // where namespace() puts its objects
  std::chrono::steady_clock::time_point deadline;  // RenderLimits::max_seconds after the start
  std::string_view deadline_error;                  // what passing it says

  // For a builtin's own loop over items (select, map): one step to the step count, however long.
  Status CheckDeadline() const {
    return std::chrono::steady_clock::now() > deadline ? Status::Error(std::string(deadline_error)) : Status::Ok();
  }
};

using FilterFn = Result<Value> (*)(const Value& input, const CallArgs& args, BuiltinContext& ctx);
using TestFn = Result<bool> (*)(const Value& input, const CallArgs& args, BuiltinContext& ctx);

// nullptr when we do not have it. Known* tells a jinja2 builtin we lack from a typo.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);
bool IsJinjaFilter(std::string_view name);
bool IsJinjaTest(std::string_view name);

// Methods of str, dict and list that templates call (Python's). `self.name` gives a bound method
// when HasMethod; a mutating method (list.append) gives an Undefined that refuses to be called,
// as jinja2's immutable sandbox does.
bool HasMethod(const Value& self, std::string_view name);
bool IsMutatingMethod(const Value& self, std::string_view name);
Result<Value> CallMethod(const Value& self, std::string_view name, const CallArgs& args, BuiltinContext& ctx);

// range, namespace, dict, raise_exception, strftime_now.
bool IsGlobal(std::string_view name);
Result<Value> CallGlobal(std::string_view name, const CallArgs& args, BuiltinContext& ctx);

// Binds arguments to a Python-style signature `name(params...)` whose first `required` params
// have no default: one slot per param, empty where the caller gave nothing.
Result<std::vector<std::optional<Value>>> BindArgs(const CallArgs& args, std::string_view function,
                                                   std::initializer_list<std::string_view> params,
                                                   size_t required);

// Argument coercions with Python's TypeError wording; `what` names the argument.
Result<int64_t> ToInt(const Value& v, std::string_view what);
Result<std::string> ToStr(const Value& v, std::string_view what);  // requires a str

}  // namespace gk::jinja
