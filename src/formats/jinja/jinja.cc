// The public entry points: parse once, render many times; errors get the template's name.
#include "formats/jinja/jinja.h"

#include <algorithm>
#include <exception>

#include "formats/jinja/json_io.h"
#include "formats/jinja/parser.h"
#include "formats/jinja/py_str.h"
#include "formats/jinja/renderer.h"

namespace gk::jinja {
namespace {

// Messages may quote template text, which need not be valid UTF-8; callers put them in JSON.
std::string ValidUtf8(std::string_view s) {
  std::string out;
  char32_t c;
  for (size_t pos = 0, length; pos < s.size(); pos += length) {
    length = py::DecodeAt(s, pos, &c);
    const bool invalid_byte = c >= 0xDC80 && c <= 0xDCFF;
    out += invalid_byte ? std::string_view("\xef\xbf\xbd") : s.substr(pos, length);  // U+FFFD
  }
  return out;
}

// "chat template line 12: ..." for errors with a line, "chat template: ..." otherwise.
std::string Prefixed(const std::string& name, const std::string& message) {
  return ValidUtf8(message.starts_with("line ") ? name + " " + message : name + ": " + message);
}

}  // namespace

Result<Template> Template::Parse(std::string_view source, std::string name) {
  try {
    Result<std::unique_ptr<const TemplateAst>> ast = ParseTemplate(source);
    if (!ast.ok()) return Result<Template>::Error(Prefixed(name, ast.message()));
    Template parsed;
    parsed.ast_ = std::shared_ptr<const TemplateAst>(std::move(ast).value());
    parsed.name_ = std::move(name);
    return parsed;
  } catch (const std::exception& e) {  // only allocation failure can get here
    return Result<Template>::Error(Prefixed(name, StrCat("internal error: ", e.what())));
  }
}

Result<std::vector<Span>> Template::Render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  using Spans = std::vector<Span>;
  if (!ast_) return Result<Spans>::Error("rendering a template that was never parsed");
  if (!context.is_object()) {
    return Result<Spans>::Error(Prefixed(name_, StrCat("the render context must be a JSON object, got ", context.type_name())));
  }
  try {
    const ScopePtr globals = std::make_shared<Scope>(nullptr);
    for (const auto& [key, json] : context.items()) {
      const auto& trusted = options.template_keys;
      const bool from_template = std::find(trusted.begin(), trusted.end(), key) != trusted.end();
      Result<Value> value = FromJson(json, from_template);
      if (!value.ok()) return Result<Spans>::Error(Prefixed(name_, StrCat("context key '", key, "': ", value.message())));
      globals->Set(key, std::move(value).value());
    }
    Result<Text> text = Renderer(options.limits).Render(*ast_, globals);
    if (!text.ok()) return Result<Spans>::Error(Prefixed(name_, text.message()));
    Spans spans;
    size_t offset = 0;
    for (const Text::Run& run : text->runs()) {
      spans.push_back(Span{text->bytes().substr(offset, run.length), run.from_template});
      offset += run.length;
    }
    return spans;
  } catch (const std::exception& e) {  // only allocation failure can get here
    return Result<Spans>::Error(Prefixed(name_, StrCat("internal error: ", e.what())));
  }
}

std::string JoinSpans(const std::vector<Span>& spans) {
  std::string out;
  for (const Span& span : spans) out += span.text;
  return out;
}

}  // namespace gk::jinja
