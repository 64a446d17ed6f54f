// Python methods templates call on values: str.split/strip/startswith/..., dict.get/items/...,
// list.index/count, loop.cycle/changed. Every Python method name is recognised (so `d.items` is
// the method even when d has an "items" key, as in Python); the ones chat templates do not use
// fail with a clear message, and mutating ones fail as jinja2's immutable sandbox makes them.
#include <algorithm>
#include <array>

#include "formats/jinja/builtins.h"
#include "formats/jinja/py_str.h"

namespace gk::jinja {
namespace {

using Bound = std::vector<std::optional<Value>>;

constexpr std::string_view kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "translate", "upper", "zfill"};
constexpr std::string_view kDictMethods[] = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                             "pop", "popitem", "setdefault", "update", "values"};
constexpr std::string_view kListMethods[] = {"append", "clear", "copy", "count", "extend", "index",
                                             "insert", "pop", "remove", "reverse", "sort"};
constexpr std::string_view kTupleMethods[] = {"count", "index"};
constexpr std::string_view kLoopMethods[] = {"cycle", "changed"};

template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

std::optional<std::string> OptionalStr(const std::optional<Value>& arg) {
  if (!arg || arg->is_none()) return std::nullopt;
  return arg->is_string() ? std::optional<std::string>(arg->text().bytes()) : std::nullopt;
}

Result<std::optional<int64_t>> OptionalInt(const std::optional<Value>& arg, std::string_view what) {
  if (!arg || arg->is_none()) return std::optional<int64_t>();
  GK_ASSIGN_OR_RETURN(int64_t i, ToInt(*arg, what));
  return std::optional<int64_t>(i);
}

Result<Value> TextList(const std::vector<Text>& parts) {
  std::vector<Value> items;
  for (const Text& part : parts) items.push_back(Value::String(part));
  return MakeList(std::move(items));
}

Result<Value> SplitMethod(const Value& self, std::string_view name, const CallArgs& args) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"sep", "maxsplit"}, 0));
  if (b[0] && !b[0]->is_none() && !b[0]->is_string()) {
    return Result<Value>::Error(StrCat("must be str or None, not ", TypeName(*b[0])));
  }
  const std::optional<std::string> sep = OptionalStr(b[0]);
  if (sep && sep->empty()) return Result<Value>::Error("empty separator");
  GK_ASSIGN_OR_RETURN(std::optional<int64_t> maxsplit, OptionalInt(b[1], "maxsplit"));
  const int64_t limit = maxsplit.value_or(-1);
  return TextList(name == "split" ? py::Split(self.text(), sep, limit) : py::RSplit(self.text(), sep, limit));
}

Result<Value> StripMethod(const Value& self, std::string_view name, const CallArgs& args) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"chars"}, 0));
  if (b[0] && !b[0]->is_none() && !b[0]->is_string()) {
    return Result<Value>::Error(StrCat(name, " arg must be None or str"));
  }
  return Value::String(py::Strip(self.text(), OptionalStr(b[0]), name != "rstrip", name != "lstrip"));
}

// startswith/endswith(prefix or tuple of prefixes, start=None, end=None), by code point.
Result<Value> AffixMethod(const Value& self, std::string_view name, const CallArgs& args) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"prefix", "start", "end"}, 1));
  GK_ASSIGN_OR_RETURN(std::optional<int64_t> start, OptionalInt(b[1], "start"));
  GK_ASSIGN_OR_RETURN(std::optional<int64_t> end, OptionalInt(b[2], "end"));
  std::vector<Value> candidates = {*b[0]};
  if (b[0]->kind() == Kind::kList && b[0]->list().kind == ListKind::kTuple) candidates = b[0]->list().items;
  const std::string& s = self.text().bytes();
  const std::vector<size_t> offsets = py::CodePointOffsets(s);
  const int64_t length = static_cast<int64_t>(offsets.size()) - 1;
  const auto clamp = [&](std::optional<int64_t> i, int64_t fallback) {
    if (!i) return fallback;
    return std::clamp<int64_t>(*i < 0 ? *i + length : *i, 0, length);
  };
  const int64_t from = clamp(start, 0), to = clamp(end, length);
  const std::string_view window =
      from <= to ? std::string_view(s).substr(offsets[from], offsets[to] - offsets[from]) : std::string_view();
  for (const Value& candidate : candidates) {
    GK_ASSIGN_OR_RETURN(std::string affix, ToStr(candidate, StrCat(name, " first arg")));
    if (from > to) continue;
    if (name == "startswith" ? window.starts_with(affix) : window.ends_with(affix)) return Value::Bool(true, true);
  }
  return Value::Bool(false, true);
}

Result<Value> FindMethod(const Value& self, std::string_view name, const CallArgs& args) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"sub", "start", "end"}, 1));
  GK_ASSIGN_OR_RETURN(std::string sub, ToStr(*b[0], StrCat(name, "() argument")));
  GK_ASSIGN_OR_RETURN(std::optional<int64_t> start, OptionalInt(b[1], "start"));
  GK_ASSIGN_OR_RETURN(std::optional<int64_t> end, OptionalInt(b[2], "end"));
  const bool reverse = name == "rfind" || name == "rindex";
  const int64_t at = py::Find(self.text().bytes(), sub, start, end, reverse);
  if (at < 0 && (name == "index" || name == "rindex")) return Result<Value>::Error("substring not found");
  return Value::Int(at, self.from_template());
}

Result<Value> StrJoin(const Value& self, const CallArgs& args) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "join", {"iterable"}, 1));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*b[0]));
  Text out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return Result<Value>::Error(StrCat("sequence item ", i, ": expected str instance, ", TypeName(items[i]), " found"));
    }
    if (i) out.Append(self.text());
    out.Append(items[i].text());
  }
  return Value::String(std::move(out));
}

Result<Value> ReplaceMethod(const Value& self, const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "replace", {"old", "new", "count"}, 2));
  GK_ASSIGN_OR_RETURN(std::string old, ToStr(*b[0], "replace() argument 1"));
  if (!b[1]->is_string()) return Result<Value>::Error(StrCat("replace() argument 2 must be str, not ", TypeName(*b[1])));
  GK_ASSIGN_OR_RETURN(std::optional<int64_t> count, OptionalInt(b[2], "count"));
  const int64_t hits = old.empty() ? static_cast<int64_t>(py::CodePointCount(self.text().bytes())) + 1
                                   : py::Count(self.text().bytes(), old);
  const size_t growth = static_cast<size_t>(std::min(hits, count.value_or(hits))) * b[1]->text().size();
  if (self.text().size() + growth > ctx.max_string_bytes) {
    return Result<Value>::Error(StrCat("replace() result exceeds the render limit of ", ctx.max_string_bytes, " bytes"));
  }
  return Value::String(py::Replace(self.text(), old, b[1]->text(), count.value_or(-1)));
}

Result<Value> StrMethod(const Value& self, std::string_view name, const CallArgs& args, BuiltinContext& ctx) {
  if (name == "split" || name == "rsplit") return SplitMethod(self, name, args);
  if (name == "strip" || name == "lstrip" || name == "rstrip") return StripMethod(self, name, args);
  if (name == "startswith" || name == "endswith") return AffixMethod(self, name, args);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") return FindMethod(self, name, args);
  if (name == "join") return StrJoin(self, args);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {}, 0));
    const Text& t = self.text();
    return Value::String(name == "upper"   ? py::Upper(t)
                         : name == "lower" ? py::Lower(t)
                         : name == "title" ? py::Title(t)
                                           : py::Capitalize(t));
  }
  if (name == "replace") return ReplaceMethod(self, args, ctx);
  if (name == "count") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"sub"}, 1));
    GK_ASSIGN_OR_RETURN(std::string sub, ToStr(*b[0], "count() argument"));
    return Value::Int(py::Count(self.text().bytes(), sub), self.from_template());
  }
  if (name == "splitlines") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"keepends"}, 0));
    return TextList(py::SplitLines(self.text(), b[0] && Truthy(*b[0])));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"affix"}, 1));
    GK_ASSIGN_OR_RETURN(std::string affix, ToStr(*b[0], StrCat(name, "() argument")));
    const std::string& s = self.text().bytes();
    if (name == "removeprefix" && s.starts_with(affix)) return Value::String(self.text().Substr(affix.size()));
    if (name == "removesuffix" && s.ends_with(affix) && !affix.empty()) {
      return Value::String(self.text().Substr(0, s.size() - affix.size()));
    }
    return self;
  }
  if (name == "isspace" || name == "islower" || name == "isupper") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {}, 0));
    const std::string& s = self.text().bytes();
    if (name == "islower") return Value::Bool(py::IsLower(s), self.from_template());
    if (name == "isupper") return Value::Bool(py::IsUpper(s), self.from_template());
    const Text stripped = py::Strip(self.text(), std::nullopt, true, true);
    return Value::Bool(!s.empty() && stripped.empty(), self.from_template());
  }
  return Result<Value>::Error(StrCat("str.", name, "() is not supported by this template engine"));
}

Result<Value> DictMethod(const Value& self, std::string_view name, const CallArgs& args) {
  const DictData& dict = self.dict();
  if (name == "get") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"key", "default"}, 1));
    if (const Value* v = dict.Find(*b[0])) return *v;
    GK_RETURN_IF_ERROR(HashKey(*b[0]).status());
    return b[1] ? *b[1] : Value::None(true);
  }
  if (name == "items" || name == "keys" || name == "values") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {}, 0));
    std::vector<Value> out;
    for (const auto& [key, value] : dict.items) {
      if (name == "keys") {
        out.push_back(key);
      } else if (name == "values") {
        out.push_back(value);
      } else {
        GK_ASSIGN_OR_RETURN(Value pair, MakeList({key, value}, ListKind::kTuple));
        out.push_back(std::move(pair));
      }
    }
    return MakeList(std::move(out), name == "keys"     ? ListKind::kDictKeys
                                    : name == "values" ? ListKind::kDictValues
                                                       : ListKind::kDictItems);
  }
  return Result<Value>::Error(StrCat("dict.", name, "() is not supported by this template engine"));
}

Result<Value> ListMethod(const Value& self, std::string_view name, const CallArgs& args) {
  const std::vector<Value>& items = self.list().items;
  if (name == "count") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"value"}, 1));
    return Value::Int(std::count_if(items.begin(), items.end(), [&](const Value& v) { return Equals(v, *b[0]); }),
                      self.from_template());
  }
  if (name == "index") {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"value"}, 1));
    for (size_t i = 0; i < items.size(); ++i) {
      if (Equals(items[i], *b[0])) return Value::Int(static_cast<int64_t>(i), self.from_template());
    }
    return Result<Value>::Error(StrCat(Repr(*b[0]), " is not in list"));
  }
  return Result<Value>::Error(StrCat(TypeName(self), ".", name, "() is not supported by this template engine"));
}

Result<Value> LoopMethod(const Value& self, std::string_view name, const CallArgs& args) {
  const LoopData& loop = self.loop();
  if (!args.keyword.empty()) return Result<Value>::Error(StrCat("loop.", name, "() takes no keyword arguments"));
  if (name == "cycle") {
    if (args.positional.empty()) return Result<Value>::Error("no items for cycling given");
    return args.positional[loop.index0 % args.positional.size()];
  }
  // changed(*values): true on the first call and whenever the values differ from the last call.
  const bool same = loop.changed_called && loop.last_changed.size() == args.positional.size() &&
                    std::equal(args.positional.begin(), args.positional.end(), loop.last_changed.begin(), Equals);
  loop.changed_called = true;
  loop.last_changed = args.positional;
  return Value::Bool(!same, true);
}

}  // namespace

bool HasMethod(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Kind::kString: return In(kStrMethods, name);
    case Kind::kDict: return In(kDictMethods, name) && !IsMutatingMethod(self, name);
    case Kind::kLoop: return In(kLoopMethods, name);
    case Kind::kList:
      if (self.list().kind == ListKind::kList) return In(kListMethods, name) && !IsMutatingMethod(self, name);
      if (self.list().kind == ListKind::kTuple || self.list().kind == ListKind::kRange) return In(kTupleMethods, name);
      return false;
    default: return false;
  }
}

bool IsMutatingMethod(const Value& self, std::string_view name) {
  static constexpr std::string_view kDictMutators[] = {"clear", "pop", "popitem", "setdefault", "update"};
  static constexpr std::string_view kListMutators[] = {"append", "reverse", "insert", "sort", "extend", "remove"};
  if (self.kind() == Kind::kDict) return In(kDictMutators, name);
  return self.kind() == Kind::kList && self.list().kind == ListKind::kList && In(kListMutators, name);
}

Result<Value> CallMethod(const Value& self, std::string_view name, const CallArgs& args, BuiltinContext& ctx) {
  switch (self.kind()) {
    case Kind::kString: return StrMethod(self, name, args, ctx);
    case Kind::kDict: return DictMethod(self, name, args);
    case Kind::kList: return ListMethod(self, name, args);
    case Kind::kLoop: return LoopMethod(self, name, args);
    default: return Result<Value>::Error(StrCat("'", TypeName(self), "' object has no method '", name, "'"));
  }
}

}  // namespace gk::jinja
