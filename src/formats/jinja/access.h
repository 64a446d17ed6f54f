// `obj.name`, `obj[key]` and `obj[a:b:c]` as jinja2's sandboxed environment resolves them:
// getattr prefers a method and falls back to the dict key, getitem prefers the key and falls back
// to a method; a miss gives an Undefined (which fails only when used), while touching anything
// on an Undefined is an error at once.
#pragma once

#include <string_view>

#include "formats/jinja/value.h"

namespace gk::jinja {

Result<Value> GetAttr(const Value& obj, std::string_view name);
// The attr() filter: Python's getattr alone, never a dict key.
Result<Value> GetAttrOnly(const Value& obj, std::string_view name);
Result<Value> GetItem(const Value& obj, const Value& key);
// start/stop/step: ints or None, nullptr where left out. Like jinja2 (which compiles slices to
// plain Python subscription) anything but a str, list, tuple or range is an error. A slice of a
// str keeps each byte's origin.
Result<Value> GetSlice(const Value& obj, const Value* start, const Value* stop, const Value* step);

}  // namespace gk::jinja
