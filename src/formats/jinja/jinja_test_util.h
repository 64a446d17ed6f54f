// Helpers for the Jinja engine's tests: render a template string over a JSON context and get
// either the text or the error message, so expectations read as plain strings.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "formats/jinja/jinja.h"

namespace gk::jinja::testing {

// The rendered text, or "ERROR: <message>" for a parse or render error.
inline std::string RenderOrError(std::string_view source, std::string_view context_json = "{}",
                                 const RenderOptions& options = {}) {
  Result<Template> parsed = Template::Parse(source);
  if (!parsed.ok()) return "ERROR: " + parsed.message();
  Result<std::vector<Span>> spans = parsed->Render(nlohmann::ordered_json::parse(context_json), options);
  if (!spans.ok()) return "ERROR: " + spans.message();
  return JoinSpans(*spans);
}

}  // namespace gk::jinja::testing
