// Python's arithmetic, comparison and membership on Values (see operators.h).
#include "formats/jinja/operators.h"

#include <cmath>

#include "formats/jinja/printf_format.h"
#include "formats/jinja/py_str.h"

namespace gk::jinja {
namespace {

// Lists built by * and + stay below this many items (strings are bounded by max_bytes).
constexpr size_t kMaxListItems = size_t{1} << 20;

const char* Symbol(Op op) {
  static const char* const kSymbols[] = {"+", "-", "*", "/", "//", "%", "**"};
  return kSymbols[static_cast<int>(op)];
}

Status Unsupported(Op op, const Value& a, const Value& b) {
  return Status::Error(StrCat("unsupported operand type(s) for ", Symbol(op), ": '", TypeName(a), "' and '",
                              TypeName(b), "'"));
}

bool IsSequence(const Value& v) {
  return v.is_string() || (v.kind() == Kind::kList && (v.list().kind == ListKind::kList || v.list().kind == ListKind::kTuple));
}

bool IsInt(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }

Status TooLong(size_t size, size_t limit) {
  return Status::Error(StrCat("a result of ", size, " bytes/items exceeds the render limit of ", limit));
}

// CPython's float floor division and modulo (_float_div_mod).
void FloatDivMod(double x, double y, double* floordiv, double* mod) {
  *mod = std::fmod(x, y);
  double div = (x - *mod) / y;
  if (*mod != 0) {
    if ((y < 0) != (*mod < 0)) {
      *mod += y;
      div -= 1.0;
    }
  } else {
    *mod = std::copysign(0.0, y);
  }
  if (div != 0) {
    *floordiv = std::floor(div);
    if (div - *floordiv > 0.5) *floordiv += 1.0;
  } else {
    *floordiv = std::copysign(0.0, x / y);
  }
}

Result<Value> IntPower(int64_t base, int64_t exponent, bool from_template) {
  if (exponent < 0) {
    if (base == 0) return Result<Value>::Error("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(static_cast<double>(base), static_cast<double>(exponent)), from_template);
  }
  // Square and multiply; once a needed square overflows the result would too (|base| >= 2).
  int64_t result = 1, square = base;
  while (exponent > 0) {
    if ((exponent & 1) && __builtin_mul_overflow(result, square, &result)) break;
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(square, square, &square)) break;
  }
  if (exponent == 0) return Value::Int(result, from_template);
  return Result<Value>::Error("integer overflow in ** (64-bit integers only)");
}

Result<Value> IntArithmetic(Op op, int64_t x, int64_t y, bool from_template) {
  int64_t r = 0;
  bool overflow = false;
  switch (op) {
    case Op::kAdd: overflow = __builtin_add_overflow(x, y, &r); break;
    case Op::kSub: overflow = __builtin_sub_overflow(x, y, &r); break;
    case Op::kMul: overflow = __builtin_mul_overflow(x, y, &r); break;
    case Op::kDiv:
      if (y == 0) return Result<Value>::Error("division by zero");
      return Value::Float(static_cast<double>(x) / static_cast<double>(y), from_template);
    case Op::kFloorDiv:
    case Op::kMod: {
      if (y == 0) return Result<Value>::Error("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        overflow = op == Op::kFloorDiv;
        break;
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        --q;
      }
      r = op == Op::kFloorDiv ? q : m;
      break;
    }
    default: return IntPower(x, y, from_template);
  }
  if (overflow) return Result<Value>::Error(StrCat("integer overflow in ", Symbol(op), " (64-bit integers only)"));
  return Value::Int(r, from_template);
}

Result<Value> FloatArithmetic(Op op, double x, double y, bool from_template) {
  double r = 0, floordiv = 0, mod = 0;
  switch (op) {
    case Op::kAdd: r = x + y; break;
    case Op::kSub: r = x - y; break;
    case Op::kMul: r = x * y; break;
    case Op::kDiv:
      if (y == 0) return Result<Value>::Error("float division by zero");
      r = x / y;
      break;
    case Op::kFloorDiv:
    case Op::kMod:
      if (y == 0) return Result<Value>::Error(op == Op::kMod ? "float modulo" : "float floor division by zero");
      FloatDivMod(x, y, &floordiv, &mod);
      r = op == Op::kMod ? mod : floordiv;
      break;
    default:
      if (x == 0 && y < 0) return Result<Value>::Error("0.0 cannot be raised to a negative power");
      if (x < 0 && std::isfinite(y) && y != std::floor(y)) {
        return Result<Value>::Error("a negative number to a fractional power is complex (not supported)");
      }
      r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
        return Result<Value>::Error("(34, 'Numerical result out of range')");
      }
  }
  return Value::Float(r, from_template);
}

Result<Value> Repeat(const Value& seq, int64_t count, size_t max_bytes) {
  count = std::max<int64_t>(count, 0);
  if (seq.is_string()) {
    const size_t size = seq.text().size();
    if (size == 0) return seq;  // (not count appends of nothing: '' * 10**18 would never end)
    if (static_cast<uint64_t>(count) > max_bytes / size) return TooLong(size * count, max_bytes);
    Text out;
    for (int64_t i = 0; i < count; ++i) out.Append(seq.text());
    return Value::String(std::move(out));
  }
  const auto& items = seq.list().items;
  if (items.empty()) return MakeList({}, seq.list().kind);  // (as for strings)
  if (static_cast<uint64_t>(count) > kMaxListItems / items.size()) {
    return TooLong(items.size() * count, kMaxListItems);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
  return MakeList(std::move(out), seq.list().kind);
}

Result<Value> Concatenate(const Value& a, const Value& b, size_t max_bytes) {
  if (a.is_string() && b.is_string()) {
    if (a.text().size() + b.text().size() > max_bytes) return TooLong(a.text().size() + b.text().size(), max_bytes);
    Text out = a.text();
    out.Append(b.text());
    return Value::String(std::move(out));
  }
  const bool same_kind = a.kind() == Kind::kList && b.kind() == Kind::kList && a.list().kind == b.list().kind;
  if (!same_kind) {
    return Result<Value>::Error(StrCat("can only concatenate ", TypeName(a), " (not \"", TypeName(b), "\") to ",
                                       TypeName(a)));
  }
  if (a.list().items.size() + b.list().items.size() > kMaxListItems) {
    return TooLong(a.list().items.size() + b.list().items.size(), kMaxListItems);
  }
  std::vector<Value> items = a.list().items;
  items.insert(items.end(), b.list().items.begin(), b.list().items.end());
  return MakeList(std::move(items), a.list().kind);
}

}  // namespace

Result<Value> Arithmetic(Op op, const Value& a, const Value& b, size_t max_bytes) {
  // str % anything runs str.__mod__ first, which accepts an Undefined argument.
  if (op == Op::kMod && a.is_string()) return PrintfFormat(a, b, max_bytes);
  if (a.is_undefined()) return Result<Value>::Error(a.undefined_hint());
  if (b.is_undefined()) return Result<Value>::Error(b.undefined_hint());
  const bool from_template = a.from_template() && b.from_template();
  if (a.is_number() && b.is_number()) {
    if (IsInt(a) && IsInt(b)) return IntArithmetic(op, a.int_value(), b.int_value(), from_template);
    return FloatArithmetic(op, a.float_value(), b.float_value(), from_template);
  }
  if (op == Op::kAdd && IsSequence(a)) return Concatenate(a, b, max_bytes);
  if (op == Op::kMul && (IsSequence(a) || IsSequence(b))) {
    const Value& seq = IsSequence(a) ? a : b;
    const Value& count = IsSequence(a) ? b : a;
    if (!IsInt(count)) {
      return Result<Value>::Error(StrCat("can't multiply sequence by non-int of type '", TypeName(count), "'"));
    }
    return Repeat(seq, count.int_value(), max_bytes);
  }
  return Unsupported(op, a, b);
}

Result<Value> Negate(const Value& v) {
  if (v.is_undefined()) return Result<Value>::Error(v.undefined_hint());
  if (v.kind() == Kind::kFloat) return Value::Float(-v.float_value(), v.from_template());
  if (!IsInt(v)) return Result<Value>::Error(StrCat("bad operand type for unary -: '", TypeName(v), "'"));
  if (v.int_value() == INT64_MIN) return Result<Value>::Error("integer overflow in unary - (64-bit integers only)");
  return Value::Int(-v.int_value(), v.from_template());
}

Result<Value> UnaryPlus(const Value& v) {
  if (v.is_undefined()) return Result<Value>::Error(v.undefined_hint());
  if (v.kind() == Kind::kFloat) return v;
  if (!IsInt(v)) return Result<Value>::Error(StrCat("bad operand type for unary +: '", TypeName(v), "'"));
  return Value::Int(v.int_value(), v.from_template());
}

Result<bool> CompareValues(Op op, const Value& a, const Value& b) {
  switch (op) {
    case Op::kEq: return Equals(a, b);
    case Op::kNe: return !Equals(a, b);
    case Op::kLt: return Compare(a, b, CompareOp::kLt);
    case Op::kLe: return Compare(a, b, CompareOp::kLe);
    case Op::kGt: return Compare(a, b, CompareOp::kGt);
    case Op::kGe: return Compare(a, b, CompareOp::kGe);
    case Op::kIn: return Contains(b, a);
    case Op::kNotIn: {
      GK_ASSIGN_OR_RETURN(bool in, Contains(b, a));
      return !in;
    }
    default: return Result<bool>::Error("not a comparison");
  }
}

Result<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string()) {
        return Result<bool>::Error(StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
      }
      return py::FindBytes(container.text().bytes(), item.text().bytes()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.list().items) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Kind::kDict: {
      GK_ASSIGN_OR_RETURN(std::string hash, HashKey(item));
      return container.dict().index.count(hash) > 0;
    }
    default:
      return Result<bool>::Error(StrCat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

}  // namespace gk::jinja
