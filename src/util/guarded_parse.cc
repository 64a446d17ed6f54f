#include "util/guarded_parse.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace gk {

std::string OneLine(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes == std::string::npos ? text.size() : max_bytes + 1));
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
    if (max_bytes != std::string::npos && out.size() > max_bytes) break;
  }
  if (max_bytes != std::string::npos && out.size() > max_bytes) {
    size_t n = max_bytes;
    // out[n] is the first byte cut: when it continues a character, cut that character whole.
    while (n > 0 && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80) --n;
    out.resize(n);
    out += "...";
  }
  return out;
}

std::string DescribeParseException(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return "out of memory (a size or count in the input is too large)";
  }
  std::string_view m = e.what();
  // nlohmann: "[json.exception.out_of_range.406] number overflow parsing '1e999'".
  if (dynamic_cast<const nlohmann::json::exception*>(&e) != nullptr && m.starts_with("[json.exception.")) {
    if (const size_t p = m.find("] "); p != std::string_view::npos) m.remove_prefix(p + 2);
  }
  if (m.empty()) m = "error while parsing";
  return OneLine(m, 400);
}

namespace {

template <class J>
Result<J> ParseJsonAs(std::string_view text, std::string_view what,
                      const typename J::parser_callback_t& callback) {
  const std::string context = what.empty() ? std::string("not valid JSON") : StrCat(what, ": not valid JSON");
  return GuardedParse(context, [&]() -> J {
    // The depth check rides on the parser callback: nlohmann parses iteratively, but copying
    // or dumping a deeply nested value recurses.
    const typename J::parser_callback_t guard = [&](int depth, typename J::parse_event_t event, J& parsed) {
      if (depth > kMaxJsonDepth) {
        throw std::length_error(StrCat("nesting deeper than ", kMaxJsonDepth, " levels"));
      }
      return callback ? callback(depth, event, parsed) : true;
    };
    return J::parse(text.data(), text.data() + text.size(), guard, /*allow_exceptions=*/true);
  });
}

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                 const nlohmann::json::parser_callback_t& callback) {
  return ParseJsonAs<nlohmann::json>(text, what, callback);
}

Result<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, std::string_view what,
                                                const nlohmann::ordered_json::parser_callback_t& callback) {
  return ParseJsonAs<nlohmann::ordered_json>(text, what, callback);
}

}  // namespace gk
