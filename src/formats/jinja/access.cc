// Attribute, item and slice access with jinja2 sandbox semantics (see access.h).
#include "formats/jinja/access.h"

#include <algorithm>

#include "formats/jinja/builtins.h"
#include "formats/jinja/py_str.h"

namespace gk::jinja {
namespace {

Value NoAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined(StrCat(py::StrRepr(ObjectTypeRepr(obj)), " has no attribute ", py::StrRepr(name)));
}

Value NoElement(const Value& obj, const Value& key) {
  if (key.is_string()) return NoAttribute(obj, key.text().bytes());
  return Value::Undefined(StrCat(ObjectTypeRepr(obj), " has no element ", Repr(key)));
}

Value Unsafe(const Value& obj, std::string_view name) {
  return Value::Undefined(StrCat("access to attribute ", py::StrRepr(name), " of ",
                                 py::StrRepr(TypeName(obj)), " object is unsafe."));
}

// The attribute half of getattr/getitem: methods, namespace attributes, loop fields.
std::optional<Value> Attribute(const Value& obj, std::string_view name) {
  if (IsMutatingMethod(obj, name)) return Unsafe(obj, name);
  if (HasMethod(obj, name)) return MakeMethod(obj, std::string(name));
  if (obj.kind() == Kind::kNamespace) {
    if (const Value* v = obj.ns()->Find(name)) return *v;
    return std::nullopt;
  }
  if (obj.kind() != Kind::kLoop) return std::nullopt;
  const LoopData& loop = obj.loop();
  const int64_t index0 = static_cast<int64_t>(loop.index0);
  const int64_t length = static_cast<int64_t>(loop.items->items.size());
  const auto counter = [](int64_t n) { return Value::Int(n, true); };
  if (name == "index") return counter(index0 + 1);
  if (name == "index0") return counter(index0);
  if (name == "revindex") return counter(length - index0);
  if (name == "revindex0") return counter(length - index0 - 1);
  if (name == "first") return Value::Bool(index0 == 0, true);
  if (name == "last") return Value::Bool(index0 + 1 == length, true);
  if (name == "length") return counter(length);
  if (name == "depth") return counter(1);
  if (name == "depth0") return counter(0);
  if (name == "previtem") {
    return index0 > 0 ? loop.items->items[index0 - 1] : Value::Undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return index0 + 1 < length ? loop.items->items[index0 + 1] : Value::Undefined("there is no next item");
  }
  return std::nullopt;
}

bool IsIndexable(const ListData& list) {
  return list.kind == ListKind::kList || list.kind == ListKind::kTuple || list.kind == ListKind::kRange;
}

// Python's PySlice_AdjustIndices for one bound (nullptr: left out).
int64_t AdjustBound(const Value* bound, int64_t length, int64_t step, bool is_start) {
  if (!bound || bound->is_none()) {
    if (step > 0) return is_start ? 0 : length;
    return is_start ? length - 1 : -1;
  }
  int64_t i = bound->int_value();
  if (i < 0) {
    i += length;
    if (i < 0) i = step < 0 ? -1 : 0;
  } else if (i >= length) {
    i = step < 0 ? length - 1 : length;
  }
  return i;
}

}  // namespace

Result<Value> GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return Result<Value>::Error(obj.undefined_hint());
  if (std::optional<Value> attribute = Attribute(obj, name)) return *attribute;
  if (obj.kind() == Kind::kDict) {
    if (const Value* v = obj.dict().Find(Value::String(std::string(name), true))) return *v;
  }
  return NoAttribute(obj, name);
}

Result<Value> GetAttrOnly(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return Result<Value>::Error(obj.undefined_hint());
  if (std::optional<Value> attribute = Attribute(obj, name)) return *attribute;
  return NoAttribute(obj, name);
}

Result<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return Result<Value>::Error(obj.undefined_hint());
  if (obj.kind() == Kind::kDict) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  }
  const bool int_key = key.kind() == Kind::kInt || key.kind() == Kind::kBool;
  if (int_key && obj.is_string()) {
    const auto span = py::CodePointSpan(obj.text().bytes(), key.int_value());
    if (!span) return NoElement(obj, key);
    return Value::String(obj.text().Substr(span->first, span->second));
  }
  if (int_key && obj.kind() == Kind::kList && IsIndexable(obj.list())) {
    const int64_t length = static_cast<int64_t>(obj.list().items.size());
    int64_t i = key.int_value();
    if (i < 0) i += length;
    if (i < 0 || i >= length) return NoElement(obj, key);
    return obj.list().items[i];
  }
  if (key.is_string()) {
    if (std::optional<Value> attribute = Attribute(obj, key.text().bytes())) return *attribute;
  }
  return NoElement(obj, key);
}

Result<Value> GetSlice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  // jinja2 compiles a slice to plain Python subscription (no sandbox getitem), so a value that
  // cannot be sliced is an error, not an Undefined.
  if (obj.is_undefined()) return Result<Value>::Error(obj.undefined_hint());
  const bool sliceable = obj.is_string() || (obj.kind() == Kind::kList && IsIndexable(obj.list()));
  if (obj.kind() == Kind::kDict) return Result<Value>::Error("unhashable type: 'slice'");
  if (!sliceable) return Result<Value>::Error(StrCat("'", TypeName(obj), "' object is not subscriptable"));
  for (const Value* bound : {start, stop, step}) {
    if (!bound || bound->is_none() || bound->kind() == Kind::kInt || bound->kind() == Kind::kBool) continue;
    if (bound->is_undefined()) return Result<Value>::Error(bound->undefined_hint());
    return Result<Value>::Error("slice indices must be integers or None or have an __index__ method");
  }
  const int64_t stride = !step || step->is_none() ? 1 : step->int_value();
  if (stride == 0) return Result<Value>::Error("slice step cannot be zero");
  // A string's code point offsets: none needed for ASCII (code point i is byte i).
  const bool table = obj.is_string() && !py::IsAscii(obj.text().bytes());
  const std::vector<size_t> offsets = table ? py::CodePointOffsets(obj.text().bytes()) : std::vector<size_t>();
  auto offset = [&](int64_t i) { return table ? offsets[i] : static_cast<size_t>(i); };
  const int64_t length = table              ? static_cast<int64_t>(offsets.size()) - 1
                         : obj.is_string() ? static_cast<int64_t>(obj.text().size())
                                           : static_cast<int64_t>(obj.list().items.size());
  const int64_t from = AdjustBound(start, length, stride, true);
  const int64_t to = AdjustBound(stop, length, stride, false);
  if (obj.is_string() && stride == 1) {  // one piece, not one per code point
    return Value::String(from < to ? obj.text().Substr(offset(from), offset(to) - offset(from)) : Text());
  }
  std::vector<int64_t> picked;
  for (int64_t i = from; stride > 0 ? i < to : i > to;) {
    picked.push_back(i);
    if (__builtin_add_overflow(i, stride, &i)) break;
  }
  if (obj.is_string()) {
    Text out;
    for (int64_t i : picked) out.Append(obj.text().Substr(offset(i), offset(i + 1) - offset(i)));
    return Value::String(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(picked.size());
  for (int64_t i : picked) items.push_back(obj.list().items[i]);
  const ListKind kind = obj.list().kind == ListKind::kTuple ? ListKind::kTuple : ListKind::kList;
  return MakeList(std::move(items), kind);
}

}  // namespace gk::jinja
