// Filters on strings and numbers (jinja2 filters.py, and tojson as transformers overrides it).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "formats/jinja/access.h"
#include "formats/jinja/filters_impl.h"
#include "formats/jinja/json_io.h"
#include "formats/jinja/py_str.h"

namespace gk::jinja::filters {
namespace {

using Bound = std::vector<std::optional<Value>>;

const Value& Or(const std::optional<Value>& arg, const Value& fallback) { return arg ? *arg : fallback; }

bool ArgTruthy(const std::optional<Value>& arg) { return arg && Truthy(*arg); }

Status CheckSize(size_t size, const BuiltinContext& ctx) {
  if (size <= ctx.max_string_bytes) return Status::Ok();
  return Status::Error(StrCat("a string of ", size, " bytes exceeds the render limit of ", ctx.max_string_bytes));
}

// Python's int(str, base): whitespace, sign, base prefix, '_' between digits.
std::optional<int64_t> ParsePythonInt(std::string_view s, int64_t base) {
  const Text trimmed = py::Strip(Text::Template(std::string(s)), std::nullopt, true, true);
  std::string_view t = trimmed.bytes();
  const bool negative = !t.empty() && t[0] == '-';
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.remove_prefix(1);
  const auto prefixed = [&](char p) { return t.size() > 1 && t[0] == '0' && (t[1] | 0x20) == p; };
  if (base == 0) {
    base = prefixed('x') ? 16 : prefixed('o') ? 8 : prefixed('b') ? 2 : 10;
    if (base == 10 && t.size() > 1 && t[0] == '0' && t.find_first_not_of("0_") != std::string_view::npos) return std::nullopt;
  }
  if (base < 2 || base > 36) return std::nullopt;
  if ((base == 16 && prefixed('x')) || (base == 8 && prefixed('o')) || (base == 2 && prefixed('b'))) {
    t.remove_prefix(2);
    if (!t.empty() && t[0] == '_') t.remove_prefix(1);
  }
  std::string digits;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() && t[i - 1] != '_' && t[i + 1] != '_') continue;
    digits += t[i];
  }
  if (negative) digits.insert(digits.begin(), '-');
  int64_t value = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value, static_cast<int>(base));
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size() || digits.empty()) return std::nullopt;
  return value;
}

// Python's float(str): whitespace, sign, digits with '_' between them, inf/infinity/nan.
std::optional<double> ParsePythonFloat(std::string_view s) {
  const Text trimmed = py::Strip(Text::Template(std::string(s)), std::nullopt, true, true);
  std::string t = trimmed.bytes();
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    const bool between_digits = i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(t[i + 1]));
    if (t[i] == '_' && !between_digits) return std::nullopt;
    if (t[i] != '_') clean += t[i];
  }
  const size_t start = !clean.empty() && (clean[0] == '+' || clean[0] == '-') ? 1 : 0;
  const std::string_view body = std::string_view(clean).substr(start);
  // from_chars takes "inf", "infinity", "nan", digits with '.' and an exponent: what Python takes.
  double value = 0;
  const auto r = std::from_chars(body.data(), body.data() + body.size(), value);
  const bool range = r.ec == std::errc::result_out_of_range;
  if (body.empty() || (r.ec != std::errc() && !range) || r.ptr != body.data() + body.size()) return std::nullopt;
  if (range) value = py::ParseDecimal(body);
  return start && clean[0] == '-' ? -value : value;
}

Result<Value> IntFromFloat(double f, bool from_template) {
  if (std::isinf(f)) return Result<Value>::Error("cannot convert float infinity to integer");
  if (std::isnan(f) || std::abs(f) >= 9.2233720368547758e18) {
    return Result<Value>::Error("cannot convert float to a 64-bit integer");
  }
  return Value::Int(static_cast<int64_t>(std::trunc(f)), from_template);
}

// Python's round(float, n): correctly rounded through glibc's exact printf (n < 0 approximately).
double RoundFloat(double x, int64_t digits) {
  if (!std::isfinite(x) || digits > 323) return x;
  if (digits < -308) return 0.0 * x;
  if (digits < 0) {
    const double scale = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / scale) * scale;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(digits), x);
  double out = 0;
  std::from_chars(buf, buf + std::char_traits<char>::length(buf), out);
  return out;
}

}  // namespace

Result<Value> Abs(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "abs", {}, 0));
  if (input.is_undefined()) return Result<Value>::Error(input.undefined_hint());
  if (input.kind() == Kind::kFloat) return Value::Float(std::fabs(input.float_value()), input.from_template());
  if (!input.is_number()) return Result<Value>::Error(StrCat("bad operand type for abs(): '", TypeName(input), "'"));
  if (input.int_value() == INT64_MIN) return Result<Value>::Error("integer overflow in abs (64-bit integers only)");
  return Value::Int(std::abs(input.int_value()), input.from_template());
}

Result<Value> Attr(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "attr", {"name"}, 1));
  GK_ASSIGN_OR_RETURN(std::string name, ToStr(*b[0], "attr() name"));
  return GetAttrOnly(input, name);
}

Result<Value> Capitalize(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "capitalize", {}, 0));
  return Value::String(py::Capitalize(ToText(input)));
}

Result<Value> Default(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "default", {"default_value", "boolean"}, 0));
  if (input.is_undefined() || (ArgTruthy(b[1]) && !Truthy(input))) return Or(b[0], Value::String("", true));
  return input;
}

Result<Value> Escape(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "escape", {}, 0));
  const Text text = ToText(input);
  Text out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text.bytes()[i];
    const char* replacement = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;"
                              : c == '\'' ? "&#39;" : nullptr;
    out.Append(replacement ? std::string_view(replacement) : std::string_view(&text.bytes()[i], 1),
               text.FromTemplateAt(i));
  }
  return Value::String(std::move(out));
}

Result<Value> Float(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "float", {"default"}, 0));
  if (input.is_undefined()) return Result<Value>::Error(input.undefined_hint());
  if (input.is_number()) return Value::Float(input.float_value(), input.from_template());
  if (input.is_string()) {
    if (std::optional<double> f = ParsePythonFloat(input.text().bytes())) return Value::Float(*f, input.from_template());
  }
  return Or(b[0], Value::Float(0.0, true));
}

Result<Value> Int(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "int", {"default", "base"}, 0));
  GK_ASSIGN_OR_RETURN(int64_t base, ToInt(Or(b[1], Value::Int(10, true)), "int() base"));
  if (input.is_undefined()) return Result<Value>::Error(input.undefined_hint());
  if (input.kind() == Kind::kInt || input.kind() == Kind::kBool) return Value::Int(input.int_value(), input.from_template());
  if (input.kind() == Kind::kFloat && !std::isnan(input.float_value())) {
    return IntFromFloat(input.float_value(), input.from_template());
  }
  if (input.is_string()) {
    if (std::optional<int64_t> i = ParsePythonInt(input.text().bytes(), base)) return Value::Int(*i, input.from_template());
    std::optional<double> f = ParsePythonFloat(input.text().bytes());
    if (f && !std::isnan(*f)) return IntFromFloat(*f, input.from_template());
  }
  return Or(b[0], Value::Int(0, true));
}

Result<Value> Length(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "length", {}, 0));
  GK_ASSIGN_OR_RETURN(int64_t n, jinja::Length(input));
  return Value::Int(n, input.from_template());
}

Result<Value> Lower(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "lower", {}, 0));
  return Value::String(py::Lower(ToText(input)));
}

Result<Value> Upper(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "upper", {}, 0));
  return Value::String(py::Upper(ToText(input)));
}

Result<Value> Replace(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "replace", {"old", "new", "count"}, 2));
  int64_t count = -1;
  if (b[2] && !b[2]->is_none()) {
    GK_ASSIGN_OR_RETURN(count, ToInt(*b[2], "replace() count"));
  }
  const Text s = ToText(input), old_text = ToText(*b[0]), replacement = ToText(*b[1]);
  const int64_t hits = old_text.empty() ? static_cast<int64_t>(py::CodePointCount(s.bytes())) + 1
                                        : py::Count(s.bytes(), old_text.bytes());
  const int64_t n = count < 0 ? hits : std::min(hits, count);
  GK_RETURN_IF_ERROR(CheckSize(s.size() + static_cast<size_t>(n) * replacement.size(), ctx));
  return Value::String(py::Replace(s, old_text.bytes(), replacement, count));
}

Result<Value> Round(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "round", {"precision", "method"}, 0));
  GK_ASSIGN_OR_RETURN(int64_t precision, ToInt(Or(b[0], Value::Int(0, true)), "round() precision"));
  GK_ASSIGN_OR_RETURN(std::string method, ToStr(Or(b[1], Value::String("common", true)), "round() method"));
  if (method != "common" && method != "ceil" && method != "floor") {
    return Result<Value>::Error("method must be common, ceil or floor");
  }
  if (input.is_undefined()) return Result<Value>::Error(input.undefined_hint());
  if (!input.is_number()) {
    return Result<Value>::Error(StrCat("type ", TypeName(input), " doesn't define __round__ method"));
  }
  const bool is_int = input.kind() != Kind::kFloat;
  if (method == "common") {
    if (is_int && precision >= 0) return Value::Int(input.int_value(), input.from_template());
    const double rounded = RoundFloat(input.float_value(), precision);
    if (is_int) return Value::Int(static_cast<int64_t>(rounded), input.from_template());
    return Value::Float(rounded, input.from_template());
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = input.float_value() * scale;
  return Value::Float((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale, input.from_template());
}

Result<Value> Safe(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "safe", {}, 0));
  return input;
}

Result<Value> String(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "string", {}, 0));
  return Value::String(ToText(input));
}

// jinja2's title filter: each word, split at runs of -, whitespace, (, {, [ and <, gets its first
// character upper-cased and the rest lower-cased (unlike str.title()).
Result<Value> Title(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "title", {}, 0));
  const Text text = ToText(input);
  const std::vector<size_t> offsets = py::CodePointOffsets(text.bytes());
  const auto is_separator = [&](size_t i) {
    char32_t c;
    py::DecodeAt(text.bytes(), offsets[i], &c);
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::IsSpace(c);
  };
  Text out;
  for (size_t i = 0; i + 1 < offsets.size();) {
    const bool separator = is_separator(i);
    size_t j = i + 1;
    while (j + 1 < offsets.size() && is_separator(j) == separator) ++j;
    out.Append(py::Upper(text.Substr(offsets[i], offsets[i + 1] - offsets[i])));
    out.Append(py::Lower(text.Substr(offsets[i + 1], offsets[j] - offsets[i + 1])));
    i = j;
  }
  return Value::String(std::move(out));
}

Result<Value> ToJson(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, 0));
  JsonDumpOptions options;
  options.ensure_ascii = ArgTruthy(b[0]);
  options.sort_keys = ArgTruthy(b[3]);
  if (b[1] && !b[1]->is_none()) {
    if (b[1]->is_string()) {
      options.indent = b[1]->text().bytes();
    } else {
      GK_ASSIGN_OR_RETURN(int64_t width, ToInt(*b[1], "tojson() indent"));
      options.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(width, 0, 1 << 16)), ' ');
    }
    options.item_separator = ",";
  }
  if (b[2] && !b[2]->is_none()) {
    const bool pair = b[2]->kind() == Kind::kList && b[2]->list().items.size() == 2;
    if (!pair) return Result<Value>::Error("tojson() separators must be an (item, key) pair of strings");
    GK_ASSIGN_OR_RETURN(options.item_separator, ToStr(b[2]->list().items[0], "tojson() item separator"));
    GK_ASSIGN_OR_RETURN(options.key_separator, ToStr(b[2]->list().items[1], "tojson() key separator"));
  }
  GK_ASSIGN_OR_RETURN(std::string json, DumpJson(input, options));
  GK_RETURN_IF_ERROR(CheckSize(json.size(), ctx));
  return Value::String(std::move(json), input.from_template());
}

Result<Value> Trim(const Value& input, const CallArgs& args, BuiltinContext&) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "trim", {"chars"}, 0));
  std::optional<std::string> chars;
  if (b[0] && !b[0]->is_none()) {  // (str.strip raises on Undefined, as on any non-str)
    if (b[0]->is_undefined() || !b[0]->is_string()) return Result<Value>::Error("strip arg must be None or str");
    chars = b[0]->text().bytes();
  }
  return Value::String(py::Strip(ToText(input), chars, true, true));
}

namespace {

// jinja2 3.1's indent does `s += "\n"` then `s.splitlines()` without str(): the errors Python gives.
Result<Value> IndentNonString(const Value& input) {
  if (input.is_undefined()) return Result<Value>::Error(input.undefined_hint());
  if (input.kind() == Kind::kList && input.list().kind == ListKind::kList) {
    return Result<Value>::Error("'list' object has no attribute 'splitlines'");
  }
  if (input.kind() == Kind::kList && input.list().kind == ListKind::kTuple) {
    return Result<Value>::Error("can only concatenate tuple (not \"str\") to tuple");
  }
  return Result<Value>::Error(StrCat("unsupported operand type(s) for +=: '", TypeName(input), "' and 'str'"));
}

}  // namespace

// indent(width=4, first=False, blank=False): every line but the first (and blank ones unless
// `blank`) gets the indentation. Line breaks keep the origin of the break they replace.
Result<Value> Indent(const Value& input, const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(Bound b, BindArgs(args, "indent", {"width", "first", "blank"}, 0));
  const Value width = Or(b[0], Value::Int(4, true));
  Text indentation;
  if (width.is_string()) {
    indentation = width.text();
  } else {
    GK_ASSIGN_OR_RETURN(int64_t n, ToInt(width, "indent() width"));
    GK_RETURN_IF_ERROR(CheckSize(static_cast<size_t>(std::max<int64_t>(n, 0)), ctx));
    indentation = Text(std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' '), width.from_template());
  }
  if (!input.is_string()) return IndentNonString(input);
  Text s = input.text();
  s.Append("\n", true);
  const std::vector<Text> lines = py::SplitLines(s, true);
  GK_RETURN_IF_ERROR(CheckSize(s.size() + lines.size() * (indentation.size() + 1), ctx));
  Text out;
  bool break_from_template = true;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<Text> without_break = py::SplitLines(lines[i], false);
    const Text content = without_break.empty() ? Text() : without_break[0];
    if (i > 0) {
      out.Append("\n", break_from_template);
      if (ArgTruthy(b[2]) || !content.empty()) out.Append(indentation);
    }
    out.Append(content);
    break_from_template = lines[i].size() > content.size() ? lines[i].FromTemplateAt(content.size()) : true;
  }
  if (ArgTruthy(b[1])) {
    Text indented = indentation;
    indented.Append(out);
    out = std::move(indented);
  }
  return Value::String(std::move(out));
}

}  // namespace gk::jinja::filters
