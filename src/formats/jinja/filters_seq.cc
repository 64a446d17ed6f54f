// Filters over sequences (jinja2 filters.py). Like jinja2, map/select/reject/unique/items and
// reverse give one-shot iterators (ListKind::kIterator: always true, no len()), sort and
// dictsort give lists.
#include <unordered_set>

#include "formats/jinja/access.h"
#include "formats/jinja/filters_impl.h"
#include "formats/jinja/operators.h"
#include "formats/jinja/py_str.h"
#include "formats/jinja/stable_sort.h"

namespace gk::jinja::filters {
namespace {

using Bound = std::vector<std::optional<Value>>;

const Value& Or(const std::optional<Value>& arg, const Value& fallback) { return arg ? *arg : fallback; }

Value IgnoreCase(const Value& v) { return v.is_string() ? Value::String(py::Lower(v.text())) : v; }

// jinja2's make_attrgetter: "user.name" or "items.0" looked up part by part with getitem; an
// Undefined part becomes `fallback` (when given) before the next part is looked up.
Result<Value> LookupPath(const Value& item, const std::optional<Value>& attribute,
                         const std::optional<Value>& fallback = std::nullopt) {
  if (!attribute || attribute->is_none()) return item;
  const auto or_fallback = [&](Value v) { return v.is_undefined() && fallback && !fallback->is_none() ? *fallback : v; };
  if (!attribute->is_string()) {
    GK_ASSIGN_OR_RETURN(Value v, GetItem(item, *attribute));
    return or_fallback(std::move(v));
  }
  Value current = item;
  const std::string& path = attribute->text().bytes();
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    const Value key = digits && part.size() < 19 ? Value::Int(std::stoll(part), true) : Value::String(part, true);
    GK_ASSIGN_OR_RETURN(current, GetItem(current, key));
    current = or_fallback(std::move(current));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// The key sort/unique/min/max compare: the attribute path(s), lower-cased unless case_sensitive.
// `attribute` may list several paths separated by commas (sort only).
Result<std::vector<Value>> SortKey(const Value& item, const std::optional<Value>& attribute, bool case_sensitive,
                                   bool multi) {
  std::vector<Value> key;
  if (multi && attribute && attribute->is_string()) {
    for (const Text& part : py::Split(attribute->text(), std::string(","), -1)) {
      GK_ASSIGN_OR_RETURN(Value v, LookupPath(item, Value::String(part)));
      key.push_back(case_sensitive ? v : IgnoreCase(v));
    }
    return key;
  }
  GK_ASSIGN_OR_RETURN(Value v, LookupPath(item, attribute));
  key.push_back(case_sensitive ? v : IgnoreCase(v));
  return key;
}

Result<bool> KeyLess(const std::vector<Value>& a, const std::vector<Value>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!Equals(a[i], b[i])) return Compare(a[i], b[i], CompareOp::kLt);
  }
  return a.size() < b.size();
}

// sorted()'s reverse: Python takes an int or a bool and raises TypeError on anything else
// (None and Undefined included), so dictsort(reverse=x) and sort(x) do too.
Result<bool> SortReverse(const std::optional<Value>& reverse) {
  if (!reverse) return false;
  if (reverse->kind() == Kind::kBool || reverse->kind() == Kind::kInt) return reverse->int_value() != 0;
  return Result<bool>::Error(StrCat("'", TypeName(*reverse), "' object cannot be interpreted as an integer"));
}

// Python's sorted(items, key=..., reverse=...): stable either way.
Status SortByKeys(std::vector<std::pair<std::vector<Value>, Value>>& keyed, bool reverse) {
  return StableSort(keyed, [reverse](const auto& a, const auto& b) {
    return reverse ? KeyLess(b.first, a.first) : KeyLess(a.first, b.first);
  });
}

Result<Value> Iterator(std::vector<Value> items) { return MakeList(std::move(items), ListKind::kIterator); }

// select / reject / selectattr / rejectattr.
Result<Value> SelectOrReject(const Value& input, const CallArgs& args, BuiltinContext& ctx, bool by_attribute,
                             bool keep_when, std::string_view name) {
  if (!Truthy(input)) return Iterator({});  // jinja2 walks the input only `if seq`
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  size_t next = 0;
  std::optional<Value> attribute;
  if (by_attribute) {
    if (args.positional.empty()) return Result<Value>::Error(StrCat(name, "() is missing the attribute name"));
    attribute = args.positional[next++];
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (args.positional.size() > next) {
    GK_ASSIGN_OR_RETURN(std::string test_name, ToStr(args.positional[next], StrCat(name, "() test name")));
    test = FindTest(test_name);
    if (!test) return Result<Value>::Error(StrCat("no test named '", test_name, "'"));
    test_args.positional.assign(args.positional.begin() + next + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> kept;
  for (const Value& item : items) {
    GK_RETURN_IF_ERROR(ctx.CheckDeadline());
    GK_ASSIGN_OR_RETURN(Value subject, LookupPath(item, attribute));
    bool passed = Truthy(subject);
    if (test) {
      GK_ASSIGN_OR_RETURN(passed, test(subject, test_args, ctx));
    }
    if (passed == keep_when) kept.push_back(item);
  }
  return Iterator(std::move(kept));
}

Result<Value> MinOrMax(const Value& input, const CallArgs& args, CompareOp better, std::string_view name) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, name, {"case_sensitive", "attribute"}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = b[0] && Truthy(*b[0]);
  size_t best = 0;
  GK_ASSIGN_OR_RETURN(std::vector<Value> best_key, SortKey(items[0], b[1], case_sensitive, false));
  for (size_t i = 1; i < items.size(); ++i) {
    GK_ASSIGN_OR_RETURN(std::vector<Value> key, SortKey(items[i], b[1], case_sensitive, false));
    GK_ASSIGN_OR_RETURN(bool is_better, Compare(key[0], best_key[0], better));
    if (is_better) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

}  // namespace

Result<Value> DictSort(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "dictsort", {"case_sensitive", "by", "reverse"}, 0));
  if (input.kind() != Kind::kDict) {
    if (input.is_undefined()) return Result<Value>::Error(input.undefined_hint());
    return Result<Value>::Error(StrCat("dictsort needs a dict, got '", TypeName(input), "'"));
  }
  GK_ASSIGN_OR_RETURN(std::string by, ToStr(Or(b[1], Value::String("key", true)), "dictsort() by"));
  if (by != "key" && by != "value") return Result<Value>::Error("You can only sort by either \"key\" or \"value\"");
  const bool case_sensitive = b[0] && Truthy(*b[0]);
  std::vector<std::pair<std::vector<Value>, Value>> keyed;
  for (const auto& [key, value] : input.dict().items) {
    const Value& sort_by = by == "key" ? key : value;
    GK_ASSIGN_OR_RETURN(Value pair, MakeList({key, value}, ListKind::kTuple));
    keyed.emplace_back(std::vector<Value>{case_sensitive ? sort_by : IgnoreCase(sort_by)}, std::move(pair));
  }
  GK_ASSIGN_OR_RETURN(const bool reverse, SortReverse(b[2]));
  GK_RETURN_IF_ERROR(SortByKeys(keyed, reverse));
  std::vector<Value> out;
  for (auto& entry : keyed) out.push_back(std::move(entry.second));
  return MakeList(std::move(out));
}

Result<Value> First(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "first", {}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> Last(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "last", {}, 0));
  if (input.kind() == Kind::kList && input.list().kind == ListKind::kIterator) {
    return Result<Value>::Error("'generator' object is not reversible");
  }
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> Items(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "items", {}, 0));
  if (input.is_undefined()) return Iterator({});
  if (input.kind() != Kind::kDict) return Result<Value>::Error("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.dict().items) {
    GK_ASSIGN_OR_RETURN(Value pair, MakeList({key, value}, ListKind::kTuple));
    pairs.push_back(std::move(pair));
  }
  return Iterator(std::move(pairs));
}

Result<Value> Join(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "join", {"d", "attribute"}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  const Text separator = ToText(Or(b[0], Value::String("", true)));
  Text out;
  for (size_t i = 0; i < items.size(); ++i) {
    GK_ASSIGN_OR_RETURN(Value item, LookupPath(items[i], b[1]));
    const Text piece = ToText(item);
    if (out.size() + separator.size() + piece.size() > ctx.max_string_bytes) {
      return Result<Value>::Error(StrCat("join() result exceeds the render limit of ", ctx.max_string_bytes, " bytes"));
    }
    if (i) out.Append(separator);
    out.Append(piece);
  }
  return Value::String(std::move(out));
}

Result<Value> List(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "list", {}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  return MakeList(std::move(items));
}

Result<Value> Map(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  if (!Truthy(input)) return Iterator({});  // jinja2 walks the input only `if value`
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  std::vector<Value> out;
  const bool by_attribute = args.positional.empty() && !args.keyword.empty() && args.keyword[0].first == "attribute";
  if (by_attribute || (args.positional.empty() && args.keyword.size() > 1)) {
    GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "map", {"attribute", "default"}, 1));
    for (const Value& item : items) {
      GK_ASSIGN_OR_RETURN(Value v, LookupPath(item, b[0], b[1]));
      out.push_back(std::move(v));
    }
    return Iterator(std::move(out));
  }
  if (args.positional.empty()) return Result<Value>::Error("map requires a filter argument");
  GK_ASSIGN_OR_RETURN(std::string name, ToStr(args.positional[0], "map() filter name"));
  const FilterFn filter = FindFilter(name);
  if (!filter) return Result<Value>::Error(StrCat("no filter named '", name, "'"));
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : items) {
    GK_RETURN_IF_ERROR(ctx.CheckDeadline());
    GK_ASSIGN_OR_RETURN(Value v, filter(item, rest, ctx));
    out.push_back(std::move(v));
  }
  return Iterator(std::move(out));
}

Result<Value> Max(const Value& input, const CallArgs& args, BuiltinContext&) {
  return MinOrMax(input, args, CompareOp::kGt, "max");
}

Result<Value> Min(const Value& input, const CallArgs& args, BuiltinContext&) {
  return MinOrMax(input, args, CompareOp::kLt, "min");
}

Result<Value> Reject(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  return SelectOrReject(input, args, ctx, false, false, "reject");
}

Result<Value> RejectAttr(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  return SelectOrReject(input, args, ctx, true, false, "rejectattr");
}

Result<Value> Select(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  return SelectOrReject(input, args, ctx, false, true, "select");
}

Result<Value> SelectAttr(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  return SelectOrReject(input, args, ctx, true, true, "selectattr");
}

Result<Value> Reverse(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "reverse", {}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  std::reverse(items.begin(), items.end());
  if (input.is_string()) {
    Text out;
    for (const Value& c : items) out.Append(c.text());
    return Value::String(std::move(out));
  }
  // reversed() of a generator fails, and jinja2 then falls back to a reversed list.
  const bool generator = input.kind() == Kind::kList && input.list().kind == ListKind::kIterator;
  return MakeList(std::move(items), generator ? ListKind::kList : ListKind::kIterator);
}

Result<Value> Sort(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "sort", {"reverse", "case_sensitive", "attribute"}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  const bool case_sensitive = b[1] && Truthy(*b[1]);
  std::vector<std::pair<std::vector<Value>, Value>> keyed;
  for (Value& item : items) {
    GK_ASSIGN_OR_RETURN(std::vector<Value> key, SortKey(item, b[2], case_sensitive, true));
    keyed.emplace_back(std::move(key), std::move(item));
  }
  GK_ASSIGN_OR_RETURN(const bool reverse, SortReverse(b[0]));
  GK_RETURN_IF_ERROR(SortByKeys(keyed, reverse));
  std::vector<Value> out;
  for (auto& entry : keyed) out.push_back(std::move(entry.second));
  return MakeList(std::move(out));
}

Result<Value> Sum(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "sum", {"attribute", "start"}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  Value total = Or(b[1], Value::Int(0, true));
  if (total.is_string()) return Result<Value>::Error("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : items) {
    GK_ASSIGN_OR_RETURN(Value v, LookupPath(item, b[0]));
    GK_ASSIGN_OR_RETURN(total, Arithmetic(Op::kAdd, total, v, ctx.max_string_bytes));
  }
  return total;
}

Result<Value> Unique(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "unique", {"case_sensitive", "attribute"}, 0));
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  const bool case_sensitive = b[0] && Truthy(*b[0]);
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : items) {
    GK_ASSIGN_OR_RETURN(std::vector<Value> key, SortKey(item, b[1], case_sensitive, false));
    GK_ASSIGN_OR_RETURN(std::string hash, HashKey(key[0]));
    if (seen.insert(std::move(hash)).second) out.push_back(item);
  }
  return Iterator(std::move(out));
}

}  // namespace gk::jinja::filters
