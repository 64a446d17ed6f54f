// libFuzzer target for the Jinja engine (src/formats/jinja/jinja.h) on arbitrary template
// sources: a checkpoint's chat_template.jinja is outside input, parsed and rendered by `serve`,
// `generate --chat` and `template`. The input is template NUL context-JSON (a fixed
// conversation with tools, fuzz/jinja_template_context.json, when the second part is missing or
// not a JSON object).
//
// Besides never crashing or hanging (tight RenderLimits), it checks:
// - a refusal is one message naming the template;
// - the spans are merged (none empty, neighbours of different origins) and within the output limit;
// - rendering twice gives the same spans (the server renders each request's prefix again);
// - provenance: every context string carries U+E000 (bytes EE 80 80), and a template that cannot
//   make that character itself (CanMakeMark) must not print it in a template span, so data never
//   turns into control tokens.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/jinja/jinja.h"
#include "formats/jinja/lexer.h"
#include "fuzz_util.h"

using namespace gk;
using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kName = "fuzz template";
constexpr std::string_view kMark = "\xee\x80\x80";  // U+E000, a private-use character

// fuzz/jinja_template_context.json, which fuzz/jinja_differential.py renders too (compiled in
// by fuzz/CMakeLists.txt).
const json& DefaultContext() {
  static const json* context = new json(json::parse(
#include "jinja_template_context.inc"
      ));
  return *context;
}

// Appends the mark to every string value, except roles and types, which templates compare.
// (Not below 300 levels: the engine refuses a context deeper than 256, and the recursion here
// must not overflow the stack on a long input.)
void MarkStrings(json& j, std::string_view key = {}, int depth = 0) {
  if (depth > 300) return;
  if (j.is_string()) {
    if (key != "role" && key != "type") j.get_ref<std::string&>() += kMark;
  } else if (j.is_object()) {
    for (auto& [k, v] : j.items()) MarkStrings(v, k, depth + 1);
  } else if (j.is_array()) {
    for (json& v : j) MarkStrings(v, {}, depth + 1);
  }
}

bool StartsWithName(const std::string& message) { return message.rfind(kName, 0) == 0; }

// Whether the template itself could print U+E000: its text or a string literal (escapes decoded)
// holds a 0xEE byte, or it may make characters from numbers: the % operator (%c), format() and
// format_map() ({:c}), translate() and maketrans() (code point tables), named directly or as a
// string (map('format'), attr('translate')). Otherwise its own strings only copy, cut, case-map
// and join its bytes, and private-use characters have no case mappings.
bool CanMakeMark(std::string_view source) {
  const Result<std::vector<jinja::Token>> tokens = jinja::Tokenize(source);
  if (!tokens.ok()) return true;  // (Parse accepted it, so this does not happen)
  const auto makes_characters = [](const std::string& name) {
    for (const char* m : {"format", "translate", "maketrans"}) {
      if (name.find(m) != std::string::npos) return true;
    }
    return false;
  };
  for (const jinja::Token& t : *tokens) {
    if ((t.type == jinja::TokenType::kData || t.type == jinja::TokenType::kString) &&
        t.value.find('\xee') != std::string::npos) {
      return true;
    }
    if ((t.type == jinja::TokenType::kName || t.type == jinja::TokenType::kString) && makes_characters(t.value)) {
      return true;
    }
    if (t.type == jinja::TokenType::kOperator && t.value == "%") return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> parts = fuzz::SplitNul(fuzz::AsText(data, size), 2);
  const std::string_view source = parts[0];
  Result<jinja::Template> parsed = jinja::Template::Parse(source, std::string(kName));
  if (!parsed.ok()) {
    fuzz::Check(StartsWithName(parsed.message()));
    return 0;
  }
  json context = parts.size() > 1 ? json::parse(parts[1], nullptr, /*allow_exceptions=*/false) : json();
  if (!context.is_object()) context = DefaultContext();
  MarkStrings(context);

  jinja::RenderOptions options;
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = 256 << 10;
  options.limits.max_seconds = 1;  // so that libFuzzer's timeout (10 s) finds a step that never looks at the clock
  const Result<std::vector<jinja::Span>> spans = parsed->Render(context, options);
  if (!spans.ok()) {
    fuzz::Check(StartsWithName(spans.message()));
  } else {
    size_t total = 0;
    for (size_t i = 0; i < spans->size(); ++i) {
      const jinja::Span& s = (*spans)[i];
      fuzz::Check(!s.text.empty());
      fuzz::Check(i == 0 || s.from_template != (*spans)[i - 1].from_template);
      total += s.text.size();
    }
    fuzz::Check(total <= options.limits.max_output_bytes);
    if (!CanMakeMark(source)) {
      for (const jinja::Span& s : *spans) fuzz::Check(!s.from_template || s.text.find(kMark) == std::string::npos);
    }
  }
  // The same template over the same context renders the same (unless it reads the clock).
  if (source.find("strftime_now") == std::string_view::npos) {
    const Result<std::vector<jinja::Span>> again = parsed->Render(context, options);
    fuzz::Check(again.ok() == spans.ok());
    if (spans.ok()) {
      fuzz::Check(again->size() == spans->size());
      for (size_t i = 0; i < spans->size(); ++i) {
        fuzz::Check((*again)[i].text == (*spans)[i].text && (*again)[i].from_template == (*spans)[i].from_template);
      }
    } else {
      fuzz::Check(again.message() == spans.message());
    }
  }
  return 0;
}
