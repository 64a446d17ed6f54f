// Python's str % args (see printf_format.h).
#include "formats/jinja/printf_format.h"

#include <cmath>
#include <cstdio>

#include "formats/jinja/access.h"
#include "formats/jinja/py_str.h"

namespace gk::jinja {
namespace {

struct Spec {
  bool left = false, plus = false, space = false, alternate = false, zero = false;
  int64_t width = 0;
  int64_t precision = -1;
  char conversion = 0;
};

// Numbers: sign, radix prefix and digits laid out in `width` as Python does.
std::string Pad(const Spec& spec, const std::string& sign, const std::string& prefix, const std::string& body,
                bool numeric) {
  const int64_t length = static_cast<int64_t>(sign.size() + prefix.size() + py::CodePointCount(body));
  const size_t fill = spec.width > length ? static_cast<size_t>(spec.width - length) : 0;
  if (spec.left) return sign + prefix + body + std::string(fill, ' ');
  if (spec.zero && numeric) return sign + prefix + std::string(fill, '0') + body;
  return std::string(fill, ' ') + sign + prefix + body;
}

Result<std::string> FormatInteger(const Spec& spec, const Value& v) {
  const char c = spec.conversion;
  const bool decimal = c == 'd' || c == 'i' || c == 'u';
  if (!v.is_number() || (!decimal && v.kind() == Kind::kFloat)) {
    return Result<std::string>::Error(StrCat("%", c, " format: ", decimal ? "a real number" : "an integer",
                                             " is required, not ", TypeName(v)));
  }
  int64_t i = v.int_value();
  if (v.kind() == Kind::kFloat) {
    if (!std::isfinite(v.float_value()) || std::abs(v.float_value()) >= 9.2e18) {
      return Result<std::string>::Error("cannot format this float with %d (64-bit integers only)");
    }
    i = static_cast<int64_t>(std::trunc(v.float_value()));
  }
  const uint64_t magnitude = i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
  char buf[32];
  std::snprintf(buf, sizeof buf, decimal ? "%llu" : c == 'o' ? "%llo" : c == 'x' ? "%llx" : "%llX",
                static_cast<unsigned long long>(magnitude));
  std::string body = buf;
  if (spec.precision > static_cast<int64_t>(body.size())) body.insert(0, spec.precision - body.size(), '0');
  const std::string sign = i < 0 ? "-" : spec.plus ? "+" : spec.space ? " " : "";
  const std::string prefix = spec.alternate && !decimal ? std::string("0") + c : "";
  return Pad(spec, sign, prefix, body, true);
}

Result<std::string> FormatFloat(const Spec& spec, const Value& v) {
  if (!v.is_number()) return Result<std::string>::Error(StrCat("must be real number, not ", TypeName(v)));
  const double f = v.float_value();
  const int precision = static_cast<int>(std::min<int64_t>(spec.precision < 0 ? 6 : spec.precision, 400));
  char format[8];
  std::snprintf(format, sizeof format, "%%%s.*%c", spec.alternate ? "#" : "", spec.conversion);
  std::string body(static_cast<size_t>(std::snprintf(nullptr, 0, format, precision, std::fabs(f))), '\0');
  std::snprintf(body.data(), body.size() + 1, format, precision, std::fabs(f));
  const bool negative = std::signbit(f) && !std::isnan(f);
  const std::string sign = negative ? "-" : spec.plus ? "+" : spec.space ? " " : "";
  return Pad(spec, sign, "", body, std::isfinite(f));
}

Result<Text> Convert(const Spec& spec, const Value& v) {
  const char c = spec.conversion;
  if (c == 's' || c == 'r' || c == 'a') {
    Text text = c == 's' ? ToText(v) : Text(Repr(v), v.from_template());
    if (spec.precision < 0 && spec.width == 0) return text;
    std::string body = text.bytes();
    if (spec.precision >= 0) {
      const std::vector<size_t> offsets = py::CodePointOffsets(body);
      body.resize(offsets[std::min<size_t>(spec.precision, offsets.size() - 1)]);
    }
    return Text(Pad(spec, "", "", body, false), text.AllTemplate());
  }
  if (c == 'c') {
    std::string ch;
    if (v.is_string() && py::CodePointCount(v.text().bytes()) == 1) {
      ch = v.text().bytes();
    } else if (v.kind() == Kind::kInt && v.int_value() >= 0 && v.int_value() <= 0x10FFFF) {
      py::AppendUtf8(ch, static_cast<char32_t>(v.int_value()));
    } else {
      return Result<Text>::Error("%c requires int or char");
    }
    return Text(Pad(spec, "", "", ch, false), v.from_template());
  }
  Result<std::string> body = std::string("dioux").find(static_cast<char>(c | 0x20)) != std::string::npos
                                 ? FormatInteger(spec, v)
                                 : FormatFloat(spec, v);
  if (!body.ok()) return body.status();
  return Text(std::move(body).value(), v.from_template());
}

// What Python's PyMapping_Check accepts besides tuples: a single such argument may go unused
// ('abc' % [1] is 'abc'), where any other single argument must be consumed.
bool MappingLike(const Value& v) {
  return v.kind() == Kind::kDict || v.is_undefined() ||
         (v.kind() == Kind::kList && (v.list().kind == ListKind::kList || v.list().kind == ListKind::kRange));
}

class Formatter {
 public:
  Formatter(const Value& format, const Value& args) : format_(format.text()), args_(args) {
    if (args.kind() == Kind::kList && args.list().kind == ListKind::kTuple) {
      positional_ = args.list().items;
    } else {
      positional_ = {args};
      single_ = true;
    }
  }

  Result<Value> Run(size_t max_bytes) {
    const std::string& f = format_.bytes();
    for (size_t i = 0; i < f.size();) {
      const size_t percent = f.find('%', i);
      out_.Append(format_.Substr(i, percent == std::string::npos ? std::string::npos : percent - i));
      if (percent == std::string::npos) break;
      Result<size_t> next = Directive(percent + 1);
      if (!next.ok()) return next.status();
      if (out_.size() > max_bytes) return Result<Value>::Error("a formatted string exceeds the render limit");
      i = *next;
    }
    if (!used_mapping_ && next_arg_ < positional_.size() && !(single_ && MappingLike(args_))) {
      return Result<Value>::Error("not all arguments converted during string formatting");
    }
    return Value::String(std::move(out_));
  }

 private:
  Result<Value> NextArg() {
    if (next_arg_ >= positional_.size()) return Result<Value>::Error("not enough arguments for format string");
    return positional_[next_arg_++];
  }

  Result<int64_t> Number(size_t& p) {
    const std::string& f = format_.bytes();
    if (p < f.size() && f[p] == '*') {
      ++p;
      GK_ASSIGN_OR_RETURN(Value v, NextArg());
      if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) return Result<int64_t>::Error("* wants int");
      return v.int_value();
    }
    int64_t n = 0;
    while (p < f.size() && f[p] >= '0' && f[p] <= '9' && n < 100000) n = n * 10 + (f[p++] - '0');
    return n;
  }

  // One directive after its '%'; returns the position after it.
  Result<size_t> Directive(size_t p) {
    const std::string& f = format_.bytes();
    std::optional<Value> mapped;
    if (p < f.size() && f[p] == '(') {
      if (args_.is_undefined()) return Result<size_t>::Error(args_.undefined_hint());
      if (args_.kind() != Kind::kDict) return Result<size_t>::Error("format requires a mapping");
      size_t depth = 1, start = ++p;
      while (p < f.size() && depth > 0) depth += f[p] == '(' ? 1 : f[p] == ')' ? -1 : 0, ++p;
      if (depth) return Result<size_t>::Error("incomplete format key");
      const Value* v = args_.dict().Find(Value::String(f.substr(start, p - 1 - start), true));
      if (!v) return Result<size_t>::Error(py::StrRepr(f.substr(start, p - 1 - start)));
      mapped = *v;
      used_mapping_ = true;
    }
    Spec spec;
    for (; p < f.size() && std::string("-+ #0").find(f[p]) != std::string::npos; ++p) {
      spec.left |= f[p] == '-', spec.plus |= f[p] == '+', spec.space |= f[p] == ' ';
      spec.alternate |= f[p] == '#', spec.zero |= f[p] == '0';
    }
    GK_ASSIGN_OR_RETURN(spec.width, Number(p));
    if (spec.width < 0) spec.left = true, spec.width = -spec.width;
    if (p < f.size() && f[p] == '.') {
      ++p;
      GK_ASSIGN_OR_RETURN(spec.precision, Number(p));
      spec.precision = std::max<int64_t>(spec.precision, 0);
    }
    while (p < f.size() && (f[p] == 'h' || f[p] == 'l' || f[p] == 'L')) ++p;
    if (p >= f.size()) return Result<size_t>::Error("incomplete format");
    spec.conversion = f[p++];
    if (spec.conversion == '%') {
      out_.Append("%", format_.FromTemplateAt(p - 1));
      return p;
    }
    if (std::string("sradiuoxXeEfFgGc").find(spec.conversion) == std::string::npos) {
      return Result<size_t>::Error(StrCat("unsupported format character '", spec.conversion, "'"));
    }
    Value arg;
    if (mapped) {
      arg = *mapped;
    } else {
      GK_ASSIGN_OR_RETURN(arg, NextArg());
    }
    GK_ASSIGN_OR_RETURN(Text converted, Convert(spec, arg));
    out_.Append(converted);
    return p;
  }

  const Text& format_;
  const Value& args_;
  std::vector<Value> positional_;
  bool single_ = false;
  bool used_mapping_ = false;
  size_t next_arg_ = 0;
  Text out_;
};

}  // namespace

Result<Value> PrintfFormat(const Value& format, const Value& args, size_t max_bytes) {
  return Formatter(format, args).Run(max_bytes);
}

}  // namespace gk::jinja
