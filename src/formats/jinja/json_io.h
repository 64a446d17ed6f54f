// JSON in and out of the engine. In: the render context (nlohmann::ordered_json, so dicts keep
// their insertion order as Python's do) becomes Values whose strings are data. Out: the tojson
// filter as transformers defines it, json.dumps(x, ensure_ascii=False, indent=..., separators=...,
// sort_keys=...), byte for byte as Python writes it (", " and ": ", floats as repr, NaN/Infinity).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/jinja/value.h"

namespace gk::jinja {

// Strings (and numbers, booleans, null) get origin `from_template`; the context passes false.
Result<Value> FromJson(const nlohmann::ordered_json& json, bool from_template);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // json.dumps indent, already turned into a string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps; an error where Python raises (Undefined, namespaces, generators, bad keys).
Result<std::string> DumpJson(const Value& value, const JsonDumpOptions& options);

}  // namespace gk::jinja
