// Expressions: names, literals, collections, attribute/item/slice access, calls (macros,
// globals, methods), filters, tests, operators and the short-circuiting and/or/if-else, which
// like Python's return one of their operands.
#include <algorithm>

#include "formats/jinja/access.h"
#include "formats/jinja/renderer.h"

namespace gk::jinja {

Result<Value> Renderer::Eval(const Expr& e, const ScopePtr& scope) {
  Status entered = Enter(e.line);
  if (!entered.ok()) {
    Leave();
    return entered;
  }
  Result<Value> result = [&]() -> Result<Value> {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return EvalName(e, scope);
      case ExprKind::kList:
      case ExprKind::kTuple:
      case ExprKind::kDict: return EvalCollection(e, scope);
      case ExprKind::kGetAttr: {
        GK_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        return AtLine(e.line, GetAttr(obj, e.name));
      }
      case ExprKind::kGetItem: return EvalGetItem(e, scope);
      case ExprKind::kSlice:
        return AtLine(e.line, Result<Value>::Error("a slice may only appear directly inside [ ]"));
      case ExprKind::kCall: return EvalCall(e, scope);
      case ExprKind::kFilter: return EvalFilter(e, scope, nullptr);
      case ExprKind::kTest: return EvalTest(e, scope);
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        GK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        return AtLine(e.line, e.kind == ExprKind::kNeg ? Negate(v) : UnaryPlus(v));
      }
      case ExprKind::kNot: {
        GK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        return Value::Bool(!Truthy(v), v.from_template());
      }
      case ExprKind::kBinary: {
        GK_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        GK_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
        return AtLine(e.line, Arithmetic(e.op, a, b, limits_.max_output_bytes));
      }
      case ExprKind::kConcat: return EvalConcat(e, scope);
      case ExprKind::kCompare: return EvalCompare(e, scope);
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        GK_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
        if (Truthy(left) == (e.kind == ExprKind::kOr)) return left;
        return Eval(*e.args[1], scope);
      }
      case ExprKind::kCondExpr: return EvalCondExpr(e, scope);
    }
    return AtLine(e.line, Result<Value>::Error("unknown expression"));
  }();
  Leave();
  return result;
}

Result<Value> Renderer::EvalName(const Expr& e, const ScopePtr& scope) {
  if (const Value* v = scope->Find(e.name)) return *v;
  if (IsGlobal(e.name)) {
    auto [it, inserted] = global_functions_.try_emplace(e.name);
    if (inserted) {
      auto global = std::make_shared<CallableData>();
      global->kind = CallableKind::kGlobal;
      global->name = e.name;
      it->second = Value::Callable(std::move(global));
    }
    return it->second;
  }
  return Value::Undefined(StrCat("'", e.name, "' is undefined"));
}

Result<Value> Renderer::EvalCollection(const Expr& e, const ScopePtr& scope) {
  std::vector<Value> values;
  values.reserve(e.args.size());
  for (const ExprPtr& arg : e.args) {
    GK_ASSIGN_OR_RETURN(Value v, Eval(*arg, scope));
    values.push_back(std::move(v));
  }
  if (e.kind != ExprKind::kDict) {
    return AtLine(e.line, MakeList(std::move(values), e.kind == ExprKind::kTuple ? ListKind::kTuple : ListKind::kList));
  }
  std::vector<std::pair<Value, Value>> items;
  for (size_t i = 0; i + 1 < values.size(); i += 2) items.emplace_back(values[i], values[i + 1]);
  return AtLine(e.line, MakeDict(std::move(items)));
}

Result<Value> Renderer::EvalGetItem(const Expr& e, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
  const Expr& key = *e.args[1];
  if (key.kind != ExprKind::kSlice) {
    GK_ASSIGN_OR_RETURN(Value k, Eval(key, scope));
    return AtLine(e.line, GetItem(obj, k));
  }
  Value bounds[3];
  const Value* given[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 0; i < 3; ++i) {
    if (!key.args[i]) continue;
    GK_ASSIGN_OR_RETURN(bounds[i], Eval(*key.args[i], scope));
    given[i] = &bounds[i];
  }
  return AtLine(e.line, GetSlice(obj, given[0], given[1], given[2]));
}

Result<Value> Renderer::EvalConcat(const Expr& e, const ScopePtr& scope) {
  Text out;
  for (const ExprPtr& arg : e.args) {
    GK_ASSIGN_OR_RETURN(Value v, Eval(*arg, scope));
    const Text piece = ToText(v);
    if (out.size() + piece.size() > limits_.max_output_bytes) {
      return AtLine(e.line, Result<Value>::Error(StrCat("a string exceeds the render limit of ",
                                                        limits_.max_output_bytes, " bytes")));
    }
    out.Append(piece);
  }
  return Value::String(std::move(out));
}

// a < b < c is (a < b) and (b < c), each operand evaluated at most once, stopping at the first
// false comparison (Python's chained comparison).
Result<Value> Renderer::EvalCompare(const Expr& e, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
  bool from_template = left.from_template();
  for (size_t i = 0; i < e.ops.size(); ++i) {
    GK_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
    from_template = from_template && right.from_template();
    GK_ASSIGN_OR_RETURN(bool holds, AtLine(e.line, CompareValues(e.ops[i], left, right)));
    if (!holds) return Value::Bool(false, from_template);
    left = std::move(right);
  }
  return Value::Bool(true, from_template);
}

Result<Value> Renderer::EvalCondExpr(const Expr& e, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value condition, Eval(*e.args[1], scope));
  if (Truthy(condition)) return Eval(*e.args[0], scope);
  if (e.args[2]) return Eval(*e.args[2], scope);
  return Value::Undefined(StrCat("the inline if-expression on line ", e.line,
                                 " evaluated to false and no else section was defined."));
}

Result<CallArgs> Renderer::EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    GK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    GK_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
    args.keyword.emplace_back(name, std::move(v));
  }
  return args;
}

Result<Value> Renderer::EvalCall(const Expr& e, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
  GK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
  return CallValue(callee, std::move(args), e.line);
}

Result<Value> Renderer::EvalFilter(const Expr& e, const ScopePtr& scope, const Value* input) {
  Value subject;
  if (!e.args[0]) {
    subject = *input;  // {% set x | f %}: the captured block
  } else if (input && e.args[0]->kind == ExprKind::kFilter) {
    GK_ASSIGN_OR_RETURN(subject, EvalFilter(*e.args[0], scope, input));
  } else {
    GK_ASSIGN_OR_RETURN(subject, Eval(*e.args[0], scope));
  }
  GK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
  return AtLine(e.line, e.filter(subject, args, builtins_));
}

Result<Value> Renderer::EvalTest(const Expr& e, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0], scope));
  GK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
  GK_ASSIGN_OR_RETURN(bool passed, AtLine(e.line, e.test(subject, args, builtins_)));
  return Value::Bool(passed, subject.from_template());
}

Result<Value> Renderer::CallValue(const Value& callee, CallArgs args, int line) {
  if (callee.is_undefined()) return AtLine(line, Result<Value>::Error(callee.undefined_hint()));
  if (callee.kind() != Kind::kCallable) {
    return AtLine(line, Result<Value>::Error(StrCat("'", TypeName(callee), "' object is not callable")));
  }
  const CallableData& c = callee.callable();
  switch (c.kind) {
    case CallableKind::kMacro: return CallMacro(c, std::move(args), line);
    case CallableKind::kGlobal: return AtLine(line, CallGlobal(c.name, args, builtins_));
    case CallableKind::kMethod: return AtLine(line, CallMethod(c.self, c.name, args, builtins_));
  }
  return AtLine(line, Result<Value>::Error("not callable"));
}

Result<Value> Renderer::CallMacro(const CallableData& macro, CallArgs args, int line) {
  if (call_depth_ >= limits_.max_call_depth) {
    return AtLine(line, Result<Value>::Error(StrCat("macro '", macro.name, "' nested deeper than ",
                                                    limits_.max_call_depth, " calls (endless recursion?)")));
  }
  const ScopePtr scope = std::make_shared<Scope>(macro.scope);
  GK_RETURN_IF_ERROR(BindMacroArgs(*macro.macro, std::move(args), line, scope));
  ++call_depth_;
  Result<Text> body = Capture(macro.macro->body, scope);
  --call_depth_;
  if (!body.ok()) return body.status();
  return Value::String(std::move(body).value());
}

// jinja2's macro calling convention: positional, then keywords for the params still open, then
// defaults (evaluated in the macro's scope, left to right); missing params are Undefined. Extra
// arguments go to varargs/kwargs when the body mentions them, else they are an error.
Status Renderer::BindMacroArgs(const MacroNode& macro, CallArgs args, int line, const ScopePtr& scope) {
  const size_t n = macro.params.size();
  std::vector<bool> filled(n, false);
  for (size_t i = 0; i < n && i < args.positional.size(); ++i) {
    scope->Set(macro.params[i], args.positional[i]);
    filled[i] = true;
  }
  if (args.positional.size() > n && !macro.takes_varargs) {
    return AtLine(line, Status::Error(StrCat("macro '", macro.name, "' takes not more than ", n, " argument(s)")));
  }
  std::vector<std::pair<Value, Value>> extra_keywords;
  for (auto& [key, value] : args.keyword) {
    const size_t i = std::find(macro.params.begin(), macro.params.end(), key) - macro.params.begin();
    if (i < n && !filled[i]) {
      scope->Set(key, std::move(value));
      filled[i] = true;
    } else if (macro.takes_kwargs) {
      extra_keywords.emplace_back(Value::String(key, true), std::move(value));
    } else {
      return AtLine(line, Status::Error(StrCat("macro '", macro.name, "' takes no keyword argument '", key, "'")));
    }
  }
  const size_t first_default = n - macro.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (filled[i]) continue;
    if (i >= first_default) {
      GK_ASSIGN_OR_RETURN(Value value, Eval(*macro.defaults[i - first_default], scope));
      scope->Set(macro.params[i], std::move(value));
    } else {
      scope->Set(macro.params[i], Value::Undefined(StrCat("parameter '", macro.params[i], "' was not provided")));
    }
  }
  if (macro.takes_varargs) {
    std::vector<Value> rest;
    if (args.positional.size() > n) rest.assign(args.positional.begin() + n, args.positional.end());
    GK_ASSIGN_OR_RETURN(Value varargs, AtLine(line, MakeList(std::move(rest), ListKind::kTuple)));
    scope->Set("varargs", std::move(varargs));
  }
  if (macro.takes_kwargs) {
    GK_ASSIGN_OR_RETURN(Value kwargs, AtLine(line, MakeDict(std::move(extra_keywords))));
    scope->Set("kwargs", std::move(kwargs));
  }
  return Status::Ok();
}

}  // namespace gk::jinja
