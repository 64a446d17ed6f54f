// The render context in, Python's json.dumps out (see json_io.h).
#include "formats/jinja/json_io.h"

#include <cmath>
#include <cstdio>

#include "formats/jinja/py_str.h"
#include "formats/jinja/stable_sort.h"

namespace gk::jinja {
namespace {

using Json = nlohmann::ordered_json;

Result<Value> FromJsonAt(const Json& json, bool from_template, int depth) {
  if (depth > kMaxValueDepth) {
    return Result<Value>::Error(StrCat("the context is nested deeper than ", kMaxValueDepth, " levels"));
  }
  switch (json.type()) {
    case Json::value_t::null: return Value::None(from_template);
    case Json::value_t::boolean: return Value::Bool(json.get<bool>(), from_template);
    case Json::value_t::number_integer: return Value::Int(json.get<int64_t>(), from_template);
    case Json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        return Result<Value>::Error(StrCat("the context holds the integer ", u, ", beyond 64-bit integers"));
      }
      return Value::Int(static_cast<int64_t>(u), from_template);
    }
    case Json::value_t::number_float: return Value::Float(json.get<double>(), from_template);
    case Json::value_t::string: return Value::String(json.get_ref<const std::string&>(), from_template);
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const Json& item : json) {
        GK_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, from_template, depth + 1));
        items.push_back(std::move(v));
      }
      return MakeList(std::move(items));
    }
    case Json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        GK_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, from_template, depth + 1));
        items.emplace_back(Value::String(key, from_template), std::move(v));
      }
      return MakeDict(std::move(items));
    }
    default: return Result<Value>::Error("the context holds binary data, which templates cannot use");
  }
}

// Python's json string encoder (encode_basestring / encode_basestring_ascii).
void DumpString(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  char buf[16];
  char32_t c;
  for (size_t pos = 0; pos < s.size();) {
    const size_t length = py::DecodeAt(s, pos, &c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                          static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          out.append(s.substr(pos, length));
        }
    }
    pos += length;
  }
  out += '"';
}

std::string DumpFloat(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return py::FloatRepr(f);
}

Result<std::string> DumpKey(const Value& key) {
  switch (key.kind()) {
    case Kind::kString: return key.text().bytes();
    case Kind::kFloat: return DumpFloat(key.float_value());
    case Kind::kBool: return std::string(key.bool_value() ? "true" : "false");
    case Kind::kNone: return std::string("null");
    case Kind::kInt: return std::to_string(key.int_value());
    default:
      return Result<std::string>::Error(
          StrCat("keys must be str, int, float, bool or None, not ", TypeName(key)));
  }
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {}

  Status Dump(const Value& v, int level, std::string& out) {
    switch (v.kind()) {
      case Kind::kNone: out += "null"; return Status::Ok();
      case Kind::kBool: out += v.bool_value() ? "true" : "false"; return Status::Ok();
      case Kind::kInt: out += std::to_string(v.int_value()); return Status::Ok();
      case Kind::kFloat: out += DumpFloat(v.float_value()); return Status::Ok();
      case Kind::kString: DumpString(v.text().bytes(), options_.ensure_ascii, out); return Status::Ok();
      case Kind::kDict: return DumpDict(v.dict(), level, out);
      case Kind::kList:
        if (v.list().kind == ListKind::kList || v.list().kind == ListKind::kTuple) {
          return DumpList(v.list().items, level, out);
        }
        break;
      default: break;
    }
    return Status::Error(StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }

 private:
  // What goes between items (and after the opening bracket) at nesting `level`.
  std::string Break(int level) const {
    if (!options_.indent) return "";
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s += *options_.indent;
    return s;
  }

  Status DumpList(const std::vector<Value>& items, int level, std::string& out) {
    if (items.empty()) {
      out += "[]";
      return Status::Ok();
    }
    out += "[" + Break(level + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += options_.item_separator + Break(level + 1);
      GK_RETURN_IF_ERROR(Dump(items[i], level + 1, out));
    }
    out += Break(level) + "]";
    return Status::Ok();
  }

  Status DumpDict(const DictData& dict, int level, std::string& out) {
    if (dict.items.empty()) {
      out += "{}";
      return Status::Ok();
    }
    std::vector<std::pair<Value, Value>> items = dict.items;
    if (options_.sort_keys) {
      GK_RETURN_IF_ERROR(StableSort(items, [](const auto& a, const auto& b) {
        return Compare(a.first, b.first, CompareOp::kLt);
      }));
    }
    out += "{" + Break(level + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += options_.item_separator + Break(level + 1);
      GK_ASSIGN_OR_RETURN(std::string key, DumpKey(items[i].first));
      DumpString(key, options_.ensure_ascii, out);
      out += options_.key_separator;
      GK_RETURN_IF_ERROR(Dump(items[i].second, level + 1, out));
    }
    out += Break(level) + "}";
    return Status::Ok();
  }

  const JsonDumpOptions& options_;
};

}  // namespace

Result<Value> FromJson(const nlohmann::ordered_json& json, bool from_template) {
  return FromJsonAt(json, from_template, 1);
}

Result<std::string> DumpJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  GK_RETURN_IF_ERROR(Dumper(options).Dump(value, 0, out));
  return out;
}

}  // namespace gk::jinja
