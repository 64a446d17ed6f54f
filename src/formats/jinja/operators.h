// Python's operators on Values, as jinja2 evaluates `a + b`, `a // b`, `x in xs`: int overflow
// and float rules as Python (floor division and modulo round toward -inf, `/` always gives a
// float, str * int repeats), with Python's TypeError wording. Results built from data are data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/jinja/value.h"

namespace gk::jinja {

enum class Op : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

// Arithmetic (kAdd .. kPow); strings and lists longer than max_bytes are refused.
Result<Value> Arithmetic(Op op, const Value& a, const Value& b, size_t max_bytes);
Result<Value> Negate(const Value& v);
Result<Value> UnaryPlus(const Value& v);
// Comparisons and membership (kEq .. kNotIn).
Result<bool> CompareValues(Op op, const Value& a, const Value& b);
Result<bool> Contains(const Value& container, const Value& item);  // item in container

}  // namespace gk::jinja
