// A hand-written scanner mirroring jinja2's regex lexer rule for rule (see lexer.h).
#include "formats/jinja/lexer.h"

#include <algorithm>
#include <charconv>

#include "formats/jinja/py_str.h"

namespace gk::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int CountNewlines(std::string_view s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// jinja2 first turns \r\n and \r into \n and drops one trailing newline.
std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's \s (Unicode whitespace): the end of the run starting at pos.
size_t SkipSpaces(std::string_view s, size_t pos) {
  char32_t c;
  while (pos < s.size()) {
    const size_t length = py::DecodeAt(s, pos, &c);
    if (!py::IsSpace(c)) break;
    pos += length;
  }
  return pos;
}

bool AllSpaces(std::string_view s) { return !s.empty() && SkipSpaces(s, 0) == s.size(); }

std::string_view RStripSpaces(std::string_view s) {
  const std::vector<size_t> offsets = py::CodePointOffsets(s);
  size_t end = offsets.size() - 1;
  char32_t c;
  while (end > 0) {
    py::DecodeAt(s, offsets[end - 1], &c);
    if (!py::IsSpace(c)) break;
    --end;
  }
  return s.substr(0, offsets[end]);
}

// Digits with single underscores between them, as in jinja2's number patterns: (\d+_)*\d+.
size_t MatchDigits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !IsDigit(s[pos])) return std::string_view::npos;
  while (pos < s.size()) {
    if (IsDigit(s[pos])) {
      ++pos;
    } else if (s[pos] == '_' && pos + 1 < s.size() && IsDigit(s[pos + 1])) {
      ++pos;
    } else {
      break;
    }
  }
  return pos;
}

bool StartsWith(std::string_view s, size_t pos, std::string_view prefix) {
  return s.substr(std::min(pos, s.size())).starts_with(prefix);
}

enum class TagKind { kRaw, kComment, kBlock, kVariable };

struct TagStart {
  TagKind kind;
  char sign;   // '-', '+' or 0
  size_t end;  // just past the tag start (for raw: past the whole {% raw %})
};

constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                           "~",  "[",  "]",  "(",  ")",  "{",  "}", ">", "<", "=", ".",
                                           ":",  "|",  ",",  ";"};

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeSource(source)) {}

  Result<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      const size_t tag = FindTagStart();
      if (tag == std::string::npos) {
        EmitData(src_.substr(pos_), 0);
        break;
      }
      const TagStart start = ClassifyTag(tag);
      EmitStrippedData(std::string_view(src_).substr(pos_, tag - pos_), start.sign,
                       start.kind == TagKind::kVariable);
      Consume(tag, start.end);
      Status status;
      switch (start.kind) {
        case TagKind::kRaw: status = LexRaw(); break;
        case TagKind::kComment: status = LexComment(); break;
        case TagKind::kBlock: status = LexTag(TokenType::kBlockBegin); break;
        case TagKind::kVariable: status = LexTag(TokenType::kVariableBegin); break;
      }
      GK_RETURN_IF_ERROR(status);
    }
    tokens_.push_back(Token{TokenType::kEof, line_, ""});
    return std::move(tokens_);
  }

 private:
  Status Fail(const std::string& message) const { return Status::Error(StrCat("line ", line_, ": ", message)); }

  size_t FindTagStart() const {
    for (size_t i = src_.find('{', pos_); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  TagStart ClassifyTag(size_t tag) const {
    const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    const size_t after = tag + 2 + (sign ? 1 : 0);
    if (src_[tag + 1] == '{') return {TagKind::kVariable, sign, after};
    if (src_[tag + 1] == '#') return {TagKind::kComment, sign, after};
    // {%(-|+|)\s*raw\s*(-%}\s*|%})
    size_t p = SkipSpaces(src_, after);
    if (StartsWith(src_, p, "raw")) {
      p = SkipSpaces(src_, p + 3);
      if (StartsWith(src_, p, "-%}")) return {TagKind::kRaw, sign, SkipSpaces(src_, p + 3)};
      if (StartsWith(src_, p, "%}")) return {TagKind::kRaw, sign, p + 2};
    }
    return {TagKind::kBlock, sign, after};
  }

  // jinja2's OptionalLStrip: '-' strips all whitespace before the tag; otherwise lstrip_blocks
  // drops the indentation before a block or comment tag that starts its line.
  void EmitStrippedData(std::string_view text, char sign, bool variable) {
    int stripped_newlines = 0;
    if (sign == '-') {
      const std::string_view kept = RStripSpaces(text);
      stripped_newlines = CountNewlines(text.substr(kept.size()));
      text = kept;
    } else if (sign != '+' && !variable) {
      const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
      if ((line_start > 0 || line_starting_) && AllSpaces(text.substr(line_start))) {
        text = text.substr(0, line_start);
      }
    }
    EmitData(text, stripped_newlines);
  }

  void EmitData(std::string_view text, int stripped_newlines) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kData, line_, std::string(text)});
    line_ += CountNewlines(text) + stripped_newlines;
  }

  // Moves past src_[from, to), counting lines as jinja2 does.
  void Consume(size_t from, size_t to) {
    const std::string_view match = std::string_view(src_).substr(from, to - from);
    line_ += CountNewlines(match);
    if (!match.empty()) line_starting_ = match.back() == '\n';
    pos_ = to;
  }

  Status LexComment() {
    const int start_line = line_;
    for (size_t q = pos_; q < src_.size(); ++q) {
      size_t end = 0;
      if (src_[q] == '+' && StartsWith(src_, q + 1, "#}")) {
        end = q + 3;
      } else if (src_[q] == '-' && StartsWith(src_, q + 1, "#}")) {
        end = SkipSpaces(src_, q + 3);
      } else if (StartsWith(src_, q, "#}")) {
        end = q + 2 + (StartsWith(src_, q + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      Consume(pos_, end);
      return Status::Ok();
    }
    return Status::Error(StrCat("line ", start_line, ": missing end of comment tag #}"));
  }

  Status LexRaw() {
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t p = q + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      p = SkipSpaces(src_, p + (sign ? 1 : 0));
      if (!StartsWith(src_, p, "endraw")) continue;
      p = SkipSpaces(src_, p + 6);
      size_t end = 0;
      if (StartsWith(src_, p, "+%}")) {
        end = p + 3;
      } else if (StartsWith(src_, p, "-%}")) {
        end = SkipSpaces(src_, p + 3);
      } else if (StartsWith(src_, p, "%}")) {
        end = p + 2 + (StartsWith(src_, p + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      EmitStrippedData(std::string_view(src_).substr(pos_, q - pos_), sign, false);
      Consume(q, end);
      return Status::Ok();
    }
    return Fail("missing {% endraw %} for {% raw %}");
  }

  // The end of the tag at pos_ if it is one: %} (trim_blocks eats one newline), -%} (eats all
  // whitespace), +%} (eats nothing); }} and -}} for variables.
  size_t MatchTagEnd(bool variable) const {
    const std::string_view close = variable ? "}}" : "%}";
    if (!variable && src_[pos_] == '+' && StartsWith(src_, pos_ + 1, close)) return pos_ + 3;
    if (src_[pos_] == '-' && StartsWith(src_, pos_ + 1, close)) return SkipSpaces(src_, pos_ + 3);
    if (StartsWith(src_, pos_, close)) {
      return pos_ + 2 + (!variable && StartsWith(src_, pos_ + 2, "\n") ? 1 : 0);
    }
    return std::string::npos;
  }

  Status LexTag(TokenType begin) {
    const bool variable = begin == TokenType::kVariableBegin;
    tokens_.push_back(Token{begin, line_, ""});
    balance_.clear();
    while (pos_ < src_.size()) {
      if (balance_.empty()) {
        const size_t end = MatchTagEnd(variable);
        if (end != std::string::npos) {
          tokens_.push_back(Token{variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, line_, ""});
          Consume(pos_, end);
          return Status::Ok();
        }
      }
      const size_t space_end = SkipSpaces(src_, pos_);
      if (space_end > pos_) {
        Consume(pos_, space_end);
        continue;
      }
      GK_RETURN_IF_ERROR(LexOperand());
    }
    return Status::Ok();  // the parser reports the unclosed tag
  }

  Status LexOperand() {
    if (LexFloat() || LexInteger()) return integer_error_.empty() ? Status::Ok() : Fail(integer_error_);
    const char c = src_[pos_];
    if (IsNameStart(c)) {
      size_t end = pos_ + 1;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Push(TokenType::kName, src_.substr(pos_, end - pos_), end);
      return Status::Ok();
    }
    if (c == '\'' || c == '"') return LexString();
    for (std::string_view op : kOperators) {
      if (!StartsWith(src_, pos_, op)) continue;
      GK_RETURN_IF_ERROR(Balance(op));
      Push(TokenType::kOperator, std::string(op), pos_ + op.size());
      return Status::Ok();
    }
    char32_t cp;
    const size_t length = py::DecodeAt(src_, pos_, &cp);
    return Fail(StrCat("unexpected character ", py::StrRepr(src_.substr(pos_, length)), " in a tag"));
  }

  Status Balance(std::string_view op) {
    if (op == "{" || op == "(" || op == "[") {
      balance_.push_back(op == "{" ? '}' : op == "(" ? ')' : ']');
    } else if (op == "}" || op == ")" || op == "]") {
      if (balance_.empty()) return Fail(StrCat("unexpected '", op, "'"));
      if (balance_.back() != op[0]) return Fail(StrCat("unexpected '", op, "', expected '", balance_.back(), "'"));
      balance_.pop_back();
    }
    return Status::Ok();
  }

  void Push(TokenType type, std::string value, size_t end) {
    tokens_.push_back(Token{type, line_, std::move(value)});
    Consume(pos_, end);
  }

  bool LexFloat();
  bool LexInteger();
  Status LexString();

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
  std::vector<char> balance_;
  std::string integer_error_;
};

// (\d+_)*\d+ ( (\.(\d+_)*\d+)? e[+-]?(\d+_)*\d+ | \.(\d+_)*\d+ ), not right after a '.'.
bool Lexer::LexFloat() {
  if (pos_ > 0 && src_[pos_ - 1] == '.') return false;
  const size_t whole = MatchDigits(src_, pos_);
  if (whole == std::string::npos) return false;
  const size_t fraction = StartsWith(src_, whole, ".") ? MatchDigits(src_, whole + 1) : std::string::npos;
  size_t end = std::string::npos;
  const size_t e = fraction != std::string::npos ? fraction : whole;
  if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
    const size_t sign = e + 1 < src_.size() && (src_[e + 1] == '+' || src_[e + 1] == '-') ? 1 : 0;
    end = MatchDigits(src_, e + 1 + sign);
  }
  if (end == std::string::npos) end = fraction;
  if (end == std::string::npos) return false;
  std::string text = src_.substr(pos_, end - pos_);
  std::erase(text, '_');
  Token token{TokenType::kFloat, line_, text};
  token.float_value = py::ParseDecimal(text);
  tokens_.push_back(std::move(token));
  Consume(pos_, end);
  return true;
}

// 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[0-9a-f])+ | [1-9](_?\d)* | 0(_?0)*, case-insensitive.
bool Lexer::LexInteger() {
  if (!IsDigit(src_[pos_])) return false;
  int base = 10;
  size_t digits = pos_;
  const char prefix = pos_ + 1 < src_.size() ? static_cast<char>(src_[pos_ + 1] | 0x20) : 0;
  const auto valid = [&](char c, int b) {
    const int v = IsDigit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 99;
    return v < b;
  };
  const auto scan = [&](size_t p, int b) {
    while (p < src_.size()) {
      if (valid(src_[p], b)) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && valid(src_[p + 1], b)) {
        p += 2;
      } else {
        break;
      }
    }
    return p;
  };
  size_t end;
  if (src_[pos_] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x') &&
      scan(pos_ + 2, prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16) > pos_ + 2) {
    base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
    digits = pos_ + 2;
    end = scan(digits, base);
  } else if (src_[pos_] != '0') {
    end = scan(pos_, 10);
  } else {
    end = pos_ + 1;
    while (StartsWith(src_, end, "0") || StartsWith(src_, end, "_0")) end += src_[end] == '_' ? 2 : 1;
  }
  std::string text = src_.substr(digits, end - digits);
  std::erase(text, '_');
  Token token{TokenType::kInteger, line_, src_.substr(pos_, end - pos_)};
  const auto parsed = std::from_chars(text.data(), text.data() + text.size(), token.int_value, base);
  if (parsed.ec != std::errc()) integer_error_ = StrCat("integer literal ", token.value, " is too large (64-bit integers only)");
  tokens_.push_back(std::move(token));
  Consume(pos_, end);
  return true;
}

// A quoted literal with Python's backslash escapes (jinja2 decodes them with unicode-escape).
Status Lexer::LexString() {
  const char quote = src_[pos_];
  std::string value;
  size_t p = pos_ + 1;
  const auto hex = [&](size_t at, int count, char32_t* out) {
    *out = 0;
    for (int i = 0; i < count; ++i) {
      const char c = at + i < src_.size() ? src_[at + i] : 0;
      const int v = IsDigit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
      if (v < 0) return false;
      *out = *out * 16 + v;
    }
    return true;
  };
  for (; p < src_.size() && src_[p] != quote; ++p) {
    if (src_[p] != '\\') {
      value += src_[p];
      continue;
    }
    if (++p >= src_.size()) break;
    const char e = src_[p];
    static const std::string_view kSimple = "\\'\"abfnrtv";
    static const std::string_view kMeaning = "\\'\"\a\b\f\n\r\t\v";
    char32_t cp;
    if (const size_t k = kSimple.find(e); k != std::string_view::npos) {
      value += kMeaning[k];
    } else if (e == '\n') {
      // a backslash-newline continues the line
    } else if (e >= '0' && e <= '7') {
      cp = 0;
      for (int i = 0; i < 3 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i, ++p) cp = cp * 8 + (src_[p] - '0');
      --p;
      py::AppendUtf8(value, cp);
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const int count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      if (!hex(p + 1, count, &cp)) return Fail(StrCat("truncated \\", e, " escape in a string literal"));
      if (cp > 0x10FFFF) return Fail("illegal Unicode character in a string literal");
      py::AppendUtf8(value, cp);
      p += count;
    } else if (e == 'N') {
      return Fail("\\N{...} escapes are not supported in string literals");
    } else {
      value += '\\';
      value += e;
    }
  }
  if (p >= src_.size()) return Fail("unterminated string literal");
  Push(TokenType::kString, std::move(value), p + 1);
  return Status::Ok();
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

}  // namespace gk::jinja
