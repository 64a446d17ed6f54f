// Python semantics of values: truthiness, str() and repr(), ==, ordering, hashing (dict keys,
// unique), iteration and len(), with Python's TypeError wording where Python raises.
#include <algorithm>
#include <cmath>

#include "formats/jinja/py_str.h"
#include "formats/jinja/value.h"

namespace gk::jinja {
namespace {

// Python compares an int with a float exactly; this is exact within the int64 range.
int CompareNumbers(const Value& a, const Value& b) {
  if (a.kind() != Kind::kFloat && b.kind() != Kind::kFloat) {
    return a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value() ? 1 : 0;
  }
  const double x = a.float_value(), y = b.float_value();
  return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as "equal" here; see NumbersEqual
}

bool NumbersEqual(const Value& a, const Value& b) {
  if (a.kind() == Kind::kFloat && std::isnan(a.float_value())) return false;
  if (b.kind() == Kind::kFloat && std::isnan(b.float_value())) return false;
  return CompareNumbers(a, b) == 0;
}

// The Python type a list-like value stands for, for equality and ordering.
bool SameSequenceType(const ListData& a, const ListData& b) {
  const auto family = [](ListKind k) { return k == ListKind::kIterator ? 100 : static_cast<int>(k); };
  return family(a.kind) == family(b.kind) && a.kind != ListKind::kIterator;
}

// Namespaces whose repr is in progress: Python prints a namespace that contains itself as
// <Namespace {...}> (its dict's recursion guard); containers cannot cycle, being immutable.
// `depth` bounds the recursion through chains of namespaces and lists (Python would raise
// RecursionError there; we print "...").
struct ActiveNamespaces {
  std::vector<const NamespaceData*> active;
  int depth = 0;
};

void ReprInto(const Value& v, std::string& out, ActiveNamespaces& state);
void ReprValue(const Value& v, std::string& out, ActiveNamespaces& state);

void ReprItems(const std::vector<Value>& items, std::string& out, ActiveNamespaces& active) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    ReprInto(items[i], out, active);
  }
}

void ReprList(const ListData& l, std::string& out, ActiveNamespaces& active) {
  switch (l.kind) {
    case ListKind::kList:
      out += '[';
      ReprItems(l.items, out, active);
      out += ']';
      return;
    case ListKind::kTuple:
      out += '(';
      ReprItems(l.items, out, active);
      out += l.items.size() == 1 ? ",)" : ")";
      return;
    case ListKind::kIterator:
      out += "<generator object>";
      return;
    case ListKind::kRange:
      out += StrCat("range(", l.range_start, ", ", l.range_stop);
      out += l.range_step == 1 ? ")" : StrCat(", ", l.range_step, ")");
      return;
    default:
      out += l.kind == ListKind::kDictKeys ? "dict_keys([" : l.kind == ListKind::kDictValues ? "dict_values([" : "dict_items([";
      ReprItems(l.items, out, active);
      out += "])";
  }
}

void ReprInto(const Value& v, std::string& out, ActiveNamespaces& state) {
  if (state.depth > 2 * kMaxValueDepth) {
    out += "...";
    return;
  }
  ++state.depth;
  ReprValue(v, out, state);
  --state.depth;
}

void ReprValue(const Value& v, std::string& out, ActiveNamespaces& active) {
  switch (v.kind()) {
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kString: out += py::StrRepr(v.text().bytes()); return;
    case Kind::kList: ReprList(v.list(), out, active); return;
    case Kind::kDict: {
      out += '{';
      const auto& items = v.dict().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        ReprInto(items[i].first, out, active);
        out += ": ";
        ReprInto(items[i].second, out, active);
      }
      out += '}';
      return;
    }
    case Kind::kNamespace: {
      if (std::find(active.active.begin(), active.active.end(), v.ns()) != active.active.end()) {
        out += "<Namespace {...}>";
        return;
      }
      active.active.push_back(v.ns());
      out += "<Namespace {";
      const auto& attrs = v.ns()->attrs;
      for (size_t i = 0; i < attrs.size(); ++i) {
        if (i) out += ", ";
        out += py::StrRepr(attrs[i].first) + ": ";
        ReprInto(attrs[i].second, out, active);
      }
      out += "}>";
      active.active.pop_back();
      return;
    }
    case Kind::kLoop: {
      const LoopData& loop = v.loop();
      out += StrCat("<LoopContext ", loop.index0 + 1, "/", loop.items->items.size(), ">");
      return;
    }
    case Kind::kCallable: {
      const CallableData& c = v.callable();
      out += c.kind == CallableKind::kMacro    ? "<Macro " + py::StrRepr(c.name) + ">"
             : c.kind == CallableKind::kGlobal ? "<function " + c.name + ">"
                                               : "<built-in method " + c.name + ">";
      return;
    }
    default: out += ToText(v).bytes();
  }
}

}  // namespace

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.bool_value();
    case Kind::kInt: return v.int_value() != 0;
    case Kind::kFloat: return v.float_value() != 0.0;
    case Kind::kString: return !v.text().empty();
    case Kind::kList: return v.list().kind == ListKind::kIterator || !v.list().items.empty();
    case Kind::kDict: return !v.dict().items.empty();
    case Kind::kLoop: return !v.loop().items->items.empty();
    default: return true;
  }
}

Text ToText(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return Text();
    case Kind::kString: return v.text();
    case Kind::kNone: return Text("None", v.from_template());
    case Kind::kBool: return Text(v.bool_value() ? "True" : "False", v.from_template());
    case Kind::kInt: return Text(std::to_string(v.int_value()), v.from_template());
    case Kind::kFloat: return Text(py::FloatRepr(v.float_value()), v.from_template());
    default: return Text(Repr(v), v.from_template());
  }
}

std::string Repr(const Value& v) {
  std::string out;
  ActiveNamespaces active;
  ReprInto(v, out, active);
  return out;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return NumbersEqual(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.text().bytes() == b.text().bytes();
    case Kind::kList: {
      const ListData &x = a.list(), &y = b.list();
      if (&x == &y) return true;
      if (!SameSequenceType(x, y) || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const DictData &x = a.dict(), &y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.Find(key);
        if (!other || !Equals(value, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return a.ns() == b.ns();
    case Kind::kLoop: return &a.loop() == &b.loop();
    case Kind::kCallable: {
      const CallableData &x = a.callable(), &y = b.callable();
      return x.kind == y.kind && x.name == y.name && x.macro == y.macro && x.scope == y.scope &&
             (x.kind != CallableKind::kMethod || Equals(x.self, y.self));
    }
    default: return false;
  }
}

Result<bool> Compare(const Value& a, const Value& b, CompareOp op) {
  if (a.is_undefined() || b.is_undefined()) {
    return Result<bool>::Error((a.is_undefined() ? a : b).undefined_hint());
  }
  int order = 0;
  if (a.is_number() && b.is_number()) {
    const bool nan = (a.kind() == Kind::kFloat && std::isnan(a.float_value())) ||
                     (b.kind() == Kind::kFloat && std::isnan(b.float_value()));
    if (nan) return false;
    order = CompareNumbers(a, b);
  } else if (a.is_string() && b.is_string()) {
    order = a.text().bytes().compare(b.text().bytes());
  } else if (a.kind() == Kind::kList && b.kind() == Kind::kList &&
             SameSequenceType(a.list(), b.list()) && a.list().kind != ListKind::kDictValues) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Compare(x[i], y[i], op);
    }
    order = x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  } else {
    static const char* const kSymbols[] = {"<", "<=", ">", ">="};
    return Result<bool>::Error(StrCat("'", kSymbols[static_cast<int>(op)],
                                      "' not supported between instances of '", TypeName(a),
                                      "' and '", TypeName(b), "'"));
  }
  switch (op) {
    case CompareOp::kLt: return order < 0;
    case CompareOp::kLe: return order <= 0;
    case CompareOp::kGt: return order > 0;
    default: return order >= 0;
  }
}

Result<std::string> HashKey(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return std::string("U");
    case Kind::kNone: return std::string("N");
    case Kind::kBool:
    case Kind::kInt: return "i" + std::to_string(v.int_value());
    case Kind::kFloat: {
      const double f = v.float_value();
      if (f == std::floor(f) && std::abs(f) < 9.2e18) return "i" + std::to_string(static_cast<int64_t>(f));
      return "f" + py::FloatRepr(f);
    }
    case Kind::kString: return StrCat("s", v.text().size(), ":", v.text().bytes());
    case Kind::kList: {
      if (v.list().kind != ListKind::kTuple) break;
      std::string key = StrCat("t", v.list().items.size(), ":");
      for (const Value& item : v.list().items) {
        GK_ASSIGN_OR_RETURN(std::string part, HashKey(item));
        key += StrCat(part.size(), ":", part);
      }
      return key;
    }
    case Kind::kNamespace: return StrCat("n", static_cast<const void*>(v.ns()));
    case Kind::kCallable: return StrCat("c", v.callable().name, static_cast<const void*>(v.callable().macro));
    default: break;
  }
  return Result<std::string>::Error(StrCat("unhashable type: '", TypeName(v), "'"));
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kLoop: return "LoopContext";
    case Kind::kCallable:
      return v.callable().kind == CallableKind::kMacro    ? "Macro"
             : v.callable().kind == CallableKind::kGlobal ? "function"
                                                          : "builtin_function_or_method";
    case Kind::kList: break;
  }
  switch (v.list().kind) {
    case ListKind::kList: return "list";
    case ListKind::kTuple: return "tuple";
    case ListKind::kIterator: return "generator";
    case ListKind::kDictKeys: return "dict_keys";
    case ListKind::kDictValues: return "dict_values";
    case ListKind::kDictItems: return "dict_items";
    default: return "range";
  }
}

std::string ObjectTypeRepr(const Value& v) {
  switch (v.kind()) {
    case Kind::kNone: return "None";
    case Kind::kUndefined: return "jinja2.runtime.Undefined object";
    case Kind::kNamespace: return "jinja2.utils.Namespace object";
    case Kind::kLoop: return "jinja2.runtime.LoopContext object";
    case Kind::kCallable:
      if (v.callable().kind == CallableKind::kMacro) return "jinja2.runtime.Macro object";
      break;
    default: break;
  }
  return TypeName(v) + " object";
}

Result<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return std::vector<Value>();
    case Kind::kList: return v.list().items;
    case Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& item : v.dict().items) keys.push_back(item.first);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      const std::vector<size_t> offsets = py::CodePointOffsets(v.text().bytes());
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::String(v.text().Substr(offsets[i], offsets[i + 1] - offsets[i])));
      }
      return chars;
    }
    default:
      return Result<std::vector<Value>>::Error(StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

Result<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return int64_t{0};
    case Kind::kString: return static_cast<int64_t>(py::CodePointCount(v.text().bytes()));
    case Kind::kDict: return static_cast<int64_t>(v.dict().items.size());
    case Kind::kLoop: return static_cast<int64_t>(v.loop().items->items.size());
    case Kind::kList:
      if (v.list().kind != ListKind::kIterator) return static_cast<int64_t>(v.list().items.size());
      break;
    default: break;
  }
  return Result<int64_t>::Error(StrCat("object of type '", TypeName(v), "' has no len()"));
}

}  // namespace gk::jinja
