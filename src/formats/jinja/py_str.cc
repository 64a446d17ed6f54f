// Python str methods and reprs on UTF-8 (see py_str.h).
#include "formats/jinja/py_str.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "formats/jinja/unicode_tables.h"

namespace gk::jinja::py {
namespace {

// Invalid bytes decode to U+DC80..U+DCFF (Python's surrogateescape) and encode back unchanged.
constexpr char32_t kEscapedByte = 0xDC00;

template <class Range>
const Range* FindRange(std::span<const Range> ranges, char32_t c) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                             [](char32_t v, const Range& r) { return v < r.first; });
  if (it == ranges.begin()) return nullptr;
  const Range& r = *(it - 1);
  if (c > r.last || (c - r.first) % r.stride != 0) return nullptr;
  return &r;
}

bool InSet(std::span<const unicode::CodeRange> set, char32_t c) { return FindRange(set, c) != nullptr; }

// Appends the full case mapping of c (special multi-code-point mappings first).
void AppendMapped(std::string& out, char32_t c, std::span<const unicode::CaseRange> ranges,
                  std::span<const unicode::SpecialCase> special) {
  for (const auto& s : special) {
    if (s.code_point == c) {
      out += s.utf8;
      return;
    }
  }
  const unicode::CaseRange* r = FindRange(ranges, c);
  AppendUtf8(out, r ? static_cast<char32_t>(static_cast<int64_t>(c) + r->delta) : c);
}

struct CodePoint {
  char32_t value;
  size_t offset;
  size_t length;
};

std::vector<CodePoint> Decode(std::string_view s) {
  std::vector<CodePoint> out;
  for (size_t pos = 0; pos < s.size();) {
    CodePoint cp{0, pos, 0};
    cp.length = DecodeAt(s, pos, &cp.value);
    out.push_back(cp);
    pos += cp.length;
  }
  return out;
}

// Answers "is byte `offset` from the template?" for increasing offsets in amortized O(1).
class OriginCursor {
 public:
  explicit OriginCursor(const Text& text) : runs_(text.runs()) {}
  bool FromTemplateAt(size_t offset) {
    while (run_ < runs_.size() && offset >= run_start_ + runs_[run_].length) {
      run_start_ += runs_[run_].length;
      ++run_;
    }
    return run_ < runs_.size() ? runs_[run_].from_template : false;
  }

 private:
  const std::vector<Text::Run>& runs_;
  size_t run_ = 0;
  size_t run_start_ = 0;
};

// Python's final-sigma rule for U+03A3 at index i (CPython handle_capital_sigma).
bool IsFinalSigma(const std::vector<CodePoint>& cps, size_t i) {
  const auto& t = unicode::Get();
  size_t j = i;
  while (j > 0 && InSet(t.case_ignorable, cps[j - 1].value)) --j;
  if (j == 0 || !InSet(t.cased, cps[j - 1].value)) return false;
  size_t k = i + 1;
  while (k < cps.size() && InSet(t.case_ignorable, cps[k].value)) ++k;
  return k == cps.size() || !InSet(t.cased, cps[k].value);
}

void AppendLower(std::string& out, const std::vector<CodePoint>& cps, size_t i) {
  const auto& t = unicode::Get();
  if (cps[i].value == 0x3A3) {
    AppendUtf8(out, IsFinalSigma(cps, i) ? 0x3C2 : 0x3C3);
  } else {
    AppendMapped(out, cps[i].value, t.lower, t.lower_special);
  }
}

enum class CaseOp { kUpper, kLower, kTitle, kCapitalize };

Text MapCase(const Text& s, CaseOp op) {
  const auto& t = unicode::Get();
  const std::vector<CodePoint> cps = Decode(s.bytes());
  OriginCursor origin(s);
  Text out;
  std::string mapped;
  bool previous_is_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    mapped.clear();
    const char32_t c = cps[i].value;
    const bool title_case = (op == CaseOp::kTitle && !previous_is_cased) ||
                            (op == CaseOp::kCapitalize && i == 0);
    if (op == CaseOp::kUpper) {
      AppendMapped(mapped, c, t.upper, t.upper_special);
    } else if (title_case) {
      AppendMapped(mapped, c, t.title, t.title_special);
    } else {
      AppendLower(mapped, cps, i);
    }
    previous_is_cased = InSet(t.cased, c);
    out.Append(mapped, origin.FromTemplateAt(cps[i].offset));
  }
  return out;
}

bool InChars(const std::vector<CodePoint>& chars, char32_t c) {
  return std::any_of(chars.begin(), chars.end(), [c](const CodePoint& x) { return x.value == c; });
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Python slice bounds: negative counts from the end, then clamp to [0, length].
int64_t ClampIndex(std::optional<int64_t> index, int64_t length, int64_t fallback) {
  if (!index) return fallback;
  int64_t i = *index < 0 ? *index + length : *index;
  return std::clamp<int64_t>(i, 0, length);
}

}  // namespace

size_t DecodeAt(std::string_view s, size_t pos, char32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  size_t length = b0 >= 0xF0 && b0 <= 0xF4 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 && b0 < 0xE0 ? 2 : 0;
  if (length == 0 || b0 > 0xF4 || pos + length > s.size()) {
    *code_point = kEscapedByte | b0;
    return 1;
  }
  char32_t c = b0 & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) {
      *code_point = kEscapedByte | b0;
      return 1;
    }
    c = (c << 6) | (byte(pos + i) & 0x3F);
  }
  const bool overlong = (length == 3 && c < 0x800) || (length == 4 && c < 0x10000);
  if (overlong || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    *code_point = kEscapedByte | b0;
    return 1;
  }
  *code_point = c;
  return length;
}

void AppendUtf8(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) {
    out += static_cast<char>(c & 0xFF);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool IsAscii(std::string_view s) {
  // ORs over 64-byte blocks, which the compiler vectorizes, stopping at the first block with a
  // high bit: a string with an early non-ASCII character costs one block, not a whole scan.
  size_t i = 0;
  for (; i + 64 <= s.size(); i += 64) {
    unsigned char any = 0;
    for (size_t j = 0; j < 64; ++j) any |= static_cast<unsigned char>(s[i + j]);
    if (any & 0x80) return false;
  }
  unsigned char any = 0;
  for (; i < s.size(); ++i) any |= static_cast<unsigned char>(s[i]);
  return any < 0x80;
}

size_t CodePointCount(std::string_view s) {
  if (IsAscii(s)) return s.size();
  size_t n = 0;
  char32_t c;
  for (size_t pos = 0; pos < s.size(); ++n) pos += DecodeAt(s, pos, &c);
  return n;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  char32_t c;
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    pos += DecodeAt(s, pos, &c);
  }
  offsets.push_back(s.size());
  return offsets;
}

namespace {

// The start of the code point that ends at `end` (a code point boundary, > 0). Decoding forward,
// a byte that is not a continuation byte (10xxxxxx) always starts a code point, and a code point
// of several bytes is such a byte and its continuation bytes. So the last code point is the
// nearest such byte within 4 bytes if it decodes to exactly the bytes up to `end`, else the last
// byte alone (an invalid byte, one code point).
size_t CodePointStartBefore(std::string_view s, size_t end) {
  auto continuation = [&](size_t i) { return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  const size_t floor = end >= 4 ? end - 4 : 0;
  size_t start = end - 1;
  while (start > floor && continuation(start)) --start;
  char32_t c;
  if (!continuation(start) && DecodeAt(s, start, &c) == end - start) return start;
  return end - 1;
}

}  // namespace

std::optional<std::pair<size_t, size_t>> CodePointSpan(std::string_view s, int64_t index) {
  if (IsAscii(s)) {
    const int64_t n = static_cast<int64_t>(s.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    return std::pair<size_t, size_t>(static_cast<size_t>(index), 1);
  }
  if (index < 0) {  // walk back from the end
    for (size_t end = s.size(); end > 0; ++index) {
      const size_t start = CodePointStartBefore(s, end);
      if (index == -1) return std::pair<size_t, size_t>(start, end - start);
      end = start;
    }
    return std::nullopt;
  }
  char32_t c;
  for (size_t pos = 0; pos < s.size(); --index) {
    const size_t length = DecodeAt(s, pos, &c);
    if (index == 0) return std::pair<size_t, size_t>(pos, length);
    pos += length;
  }
  return std::nullopt;
}

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsPrintable(char32_t c) { return !InSet(unicode::Get().non_printable, c); }

bool IsLower(std::string_view s) {
  const auto& t = unicode::Get();
  bool cased = false;
  for (const CodePoint& cp : Decode(s)) {
    if (InSet(t.uppercase, cp.value) || InSet(t.titlecase, cp.value)) return false;
    if (InSet(t.lowercase, cp.value)) cased = true;
  }
  return cased;
}

bool IsUpper(std::string_view s) {
  const auto& t = unicode::Get();
  bool cased = false;
  for (const CodePoint& cp : Decode(s)) {
    if (InSet(t.lowercase, cp.value) || InSet(t.titlecase, cp.value)) return false;
    if (InSet(t.uppercase, cp.value)) cased = true;
  }
  return cased;
}

Text Upper(const Text& s) { return MapCase(s, CaseOp::kUpper); }
Text Lower(const Text& s) { return MapCase(s, CaseOp::kLower); }
Text Title(const Text& s) { return MapCase(s, CaseOp::kTitle); }
Text Capitalize(const Text& s) { return MapCase(s, CaseOp::kCapitalize); }

Text Strip(const Text& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<CodePoint> cps = Decode(s.bytes());
  const std::vector<CodePoint> strip_set = chars ? Decode(*chars) : std::vector<CodePoint>{};
  const auto strips = [&](char32_t c) { return chars ? InChars(strip_set, c) : IsSpace(c); };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strips(cps[begin].value)) ++begin;
  }
  if (right) {
    while (end > begin && strips(cps[end - 1].value)) --end;
  }
  if (begin == end) return Text();
  const size_t from = cps[begin].offset;
  return s.Substr(from, cps[end - 1].offset + cps[end - 1].length - from);
}

size_t FindBytes(std::string_view s, std::string_view sub, size_t from) {
  if (from > s.size()) return std::string::npos;
  if (sub.empty()) return from;
  const void* hit = memmem(s.data() + from, s.size() - from, sub.data(), sub.size());
  return hit ? static_cast<size_t>(static_cast<const char*>(hit) - s.data()) : std::string::npos;
}

size_t RFindBytes(std::string_view s, std::string_view sub) {
  if (sub.size() > s.size()) return std::string::npos;
  const std::string reversed(s.rbegin(), s.rend()), reversed_sub(sub.rbegin(), sub.rend());
  const size_t hit = FindBytes(reversed, reversed_sub);
  return hit == std::string::npos ? hit : s.size() - hit - sub.size();
}

std::vector<Text> Split(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<Text> parts;
  const std::string& b = s.bytes();
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    size_t start = 0;
    for (size_t hit; maxsplit > 0 && (hit = FindBytes(b, *sep, start)) != std::string::npos; --maxsplit) {
      parts.push_back(s.Substr(start, hit - start));
      start = hit + sep->size();
    }
    parts.push_back(s.Substr(start));
    return parts;
  }
  const std::vector<CodePoint> cps = Decode(b);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsSpace(cps[i].value)) ++i;
    if (i == cps.size()) break;
    if (maxsplit-- == 0) {
      parts.push_back(s.Substr(cps[i].offset));
      break;
    }
    const size_t word = i;
    while (i < cps.size() && !IsSpace(cps[i].value)) ++i;
    const size_t end = i < cps.size() ? cps[i].offset : b.size();
    parts.push_back(s.Substr(cps[word].offset, end - cps[word].offset));
  }
  return parts;
}

std::vector<Text> RSplit(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<Text> parts;
  const std::string& b = s.bytes();
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    // Forward searches in the reversed string: one copy, linear time (see FindBytes).
    const std::string reversed(b.rbegin(), b.rend()), reversed_sep(sep->rbegin(), sep->rend());
    size_t end = b.size();
    for (size_t r; maxsplit > 0 && (r = FindBytes(reversed, reversed_sep, b.size() - end)) != std::string::npos;
         --maxsplit) {
      const size_t hit = b.size() - r - sep->size();
      parts.push_back(s.Substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.push_back(s.Substr(0, end));
  } else {
    const std::vector<CodePoint> cps = Decode(b);
    size_t i = cps.size();
    while (true) {
      while (i > 0 && IsSpace(cps[i - 1].value)) --i;
      if (i == 0) break;
      const size_t end = cps[i - 1].offset + cps[i - 1].length;
      if (maxsplit-- == 0) {
        parts.push_back(s.Substr(0, end));
        break;
      }
      while (i > 0 && !IsSpace(cps[i - 1].value)) --i;
      parts.push_back(s.Substr(cps[i].offset, end - cps[i].offset));
    }
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<Text> SplitLines(const Text& s, bool keep_ends) {
  std::vector<Text> lines;
  const std::vector<CodePoint> cps = Decode(s.bytes());
  size_t line_start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!IsLineBreak(cps[i].value)) continue;
    const size_t break_start = cps[i].offset;
    if (cps[i].value == '\r' && i + 1 < cps.size() && cps[i + 1].value == '\n') ++i;
    const size_t break_end = cps[i].offset + cps[i].length;
    const size_t line_end = keep_ends ? break_end : break_start;
    lines.push_back(s.Substr(line_start, line_end - line_start));
    line_start = break_end;
  }
  if (line_start < s.size()) lines.push_back(s.Substr(line_start));
  return lines;
}

Text Replace(const Text& s, std::string_view old, const Text& replacement, int64_t count) {
  if (count < 0) count = INT64_MAX;
  Text out;
  const std::string& b = s.bytes();
  if (old.empty()) {
    const std::vector<size_t> offsets = CodePointOffsets(b);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count-- > 0) out.Append(replacement);
      out.Append(s.Substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    if (count > 0) out.Append(replacement);
    return out;
  }
  size_t start = 0;
  for (size_t hit; count > 0 && (hit = FindBytes(b, old, start)) != std::string::npos; --count) {
    out.Append(s.Substr(start, hit - start));
    out.Append(replacement);
    start = hit + old.size();
  }
  out.Append(s.Substr(start));
  return out;
}

int64_t Find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
             std::optional<int64_t> end, bool reverse) {
  const std::vector<size_t> offsets = CodePointOffsets(s);
  const int64_t length = static_cast<int64_t>(offsets.size()) - 1;
  const int64_t from = ClampIndex(start, length, 0);
  const int64_t to = ClampIndex(end, length, length);
  if (from > to) return -1;
  const std::string_view window = s.substr(offsets[from], offsets[to] - offsets[from]);
  const size_t hit = reverse ? RFindBytes(window, sub) : FindBytes(window, sub);
  if (hit == std::string_view::npos) return -1;
  const size_t byte = offsets[from] + hit;
  return std::lower_bound(offsets.begin(), offsets.end(), byte) - offsets.begin();
}

int64_t Count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
  int64_t n = 0;
  for (size_t pos = FindBytes(s, sub); pos != std::string::npos; pos = FindBytes(s, sub, pos + sub.size())) ++n;
  return n;
}

double ParseDecimal(std::string_view literal) {
  double value = 0;
  const auto result = std::from_chars(literal.data(), literal.data() + literal.size(), value);
  if (result.ec != std::errc::result_out_of_range) return value;
  // Out of range: too large (inf) or too small (0.0), told apart by the exponent's sign or, with
  // no exponent, by whether any digit before the point is nonzero.
  const size_t e = literal.find_first_of("eE");
  if (e != std::string_view::npos) return literal.substr(e + 1).starts_with('-') ? 0.0 : HUGE_VAL;
  return literal.substr(0, literal.find('.')).find_first_of("123456789") != std::string_view::npos ? HUGE_VAL : 0.0;
}

std::string StrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const CodePoint& cp : Decode(s)) {
    const char32_t c = cp.value;
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F || (c >= 0xDC80 && c <= 0xDCFF)) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c & 0xFF));
      out += buf;
    } else if (c < 0x7F || IsPrintable(c)) {
      AppendUtf8(out, c);
    } else {
      std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x",
                    static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string FloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string_view sci(buf, result.ptr - buf);  // [-]d[.ddd]e(+|-)dd, shortest round trip
  const size_t e = sci.find('e');
  std::string digits;
  bool negative = false;
  for (char c : sci.substr(0, e)) {
    if (c == '-') negative = true;
    if (c >= '0' && c <= '9') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
  const int point = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  std::string out = negative ? "-" : "";
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (point >= n) {
      out += digits + std::string(point - n, '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buf;
}

}  // namespace gk::jinja::py
