#include "tools/eval/verilog_prompt.h"

#include <string_view>

namespace gk::eval {
namespace {

// The reference harness is Python: its str.strip() and the regex's \s both use Unicode
// whitespace, so candidates with e.g. a no-break space around the code strip the same way here.
// Returns the byte length of the whitespace character starting at s[i], 0 if there is none.
size_t WhitespaceAt(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned b0 = at(0), b1 = at(1), b2 = at(2);
  if ((b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20)) return 1;
  if (b0 == 0xC2) return b1 == 0x85 || b1 == 0xA0 ? 2 : 0;  // U+0085, U+00A0
  if (b0 == 0xE1) return b1 == 0x9A && b2 == 0x80 ? 3 : 0;  // U+1680
  if (b0 == 0xE2 && b1 == 0x80) {                           // U+2000..200A, 2028, 2029, 202F
    return (b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF ? 3 : 0;
  }
  if (b0 == 0xE2) return b1 == 0x81 && b2 == 0x9F ? 3 : 0;  // U+205F
  if (b0 == 0xE3) return b1 == 0x80 && b2 == 0x80 ? 3 : 0;  // U+3000
  return 0;
}

// The byte length of the whitespace character that ends just before s[end], 0 if there is none.
size_t WhitespaceBefore(std::string_view s, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; ++len)
    if (WhitespaceAt(s, end - len) == len) return len;
  return 0;
}

std::string_view LStrip(std::string_view s) {
  size_t i = 0;
  for (size_t w; (w = WhitespaceAt(s, i)) > 0;) i += w;
  return s.substr(i);
}

std::string_view RStrip(std::string_view s) {
  size_t end = s.size();
  for (size_t w; (w = WhitespaceBefore(s, end)) > 0;) end -= w;
  return s.substr(0, end);
}

std::string_view Strip(std::string_view s) { return RStrip(LStrip(s)); }

constexpr std::string_view kFence = "```";
// The regex's optional tag group, tried in its order; case-sensitive, so "```Verilog" has none.
constexpr std::string_view kTags[] = {"verilog", "systemverilog", "sv"};
// The prefixes the unclosed-fence fallback removes, in the reference's order.
constexpr std::string_view kOpenFences[] = {"```verilog", "```systemverilog", "```sv", "```"};

// Same content as the reference's hint sentences (§3.2), in our own words.
constexpr std::string_view kHints =
    "Call the module `TopModule`. "
    "Keep every port name exactly as the interface above gives it. "
    "Declare each signal that is assigned inside an always block as `reg`, not `wire`. "
    "Assign array elements one at a time (for example mem[i] <= value), never the whole array in one statement. "
    "Reply with only the Verilog code, inside a ```verilog ... ``` fenced block.";

}  // namespace

std::string BuildVerilogPrompt(const std::string& problem_text) {
  std::string out(Strip(problem_text));
  out += "\n\n";
  out += kHints;
  return out;
}

// The reference's first match of ```(?:verilog|systemverilog|sv)?\s*(.*?)``` (DOTALL), without a
// regex engine: only the first ``` can start a match (a later one would need a closing fence
// further on still), the tag and \s* hold no backticks, so the lazy code group ends at the first
// ``` after them.
std::string ExtractVerilog(const std::string& response) {
  const std::string_view text = response;
  if (const size_t open = text.find(kFence); open != std::string_view::npos) {
    size_t code = open + kFence.size();
    for (std::string_view tag : kTags) {
      if (text.substr(code).starts_with(tag)) {
        code += tag.size();
        break;
      }
    }
    for (size_t w; (w = WhitespaceAt(text, code)) > 0;) code += w;
    if (const size_t close = text.find(kFence, code); close != std::string_view::npos) {
      return std::string(Strip(text.substr(code, close - code)));
    }
  }
  // No closed fence, e.g. generation stopped at max_new_tokens inside the block.
  const std::string_view t = Strip(text);
  for (std::string_view fence : kOpenFences) {
    if (!t.starts_with(fence)) continue;
    std::string_view code = RStrip(t.substr(fence.size()));
    if (code.ends_with(kFence)) code.remove_suffix(kFence.size());
    return std::string(Strip(code));
  }
  return std::string(t);
}

}  // namespace gk::eval
