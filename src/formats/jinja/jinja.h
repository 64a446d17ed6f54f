// gemmakit's Jinja engine: renders the Jinja subset Hugging Face chat templates use, exactly as
// transformers' apply_chat_template renders them with jinja2 (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols; raise_exception, strftime_now and transformers' tojson).
// We carry our own because no Debian package provides a Jinja engine for C++ (inja and minja are
// not packaged), and because we need what no engine offers: the origin of every output byte.
//
// Provenance: each output span says whether its bytes came from the template source (literals
// and template text) or from data (the context: messages, tools, kwargs). A tokenizer can then
// encode template spans with control tokens and data spans as plain text, so a message that
// contains "<|turn>" cannot inject a turn. Data never becomes template through any operation.
//
// Anything the engine cannot render (unknown filters, tests or tags, {% include %}, unbalanced
// blocks) is refused by Parse, with the line. Render never crashes or hangs on any input: depth,
// steps, output size and time are bounded (RenderLimits; nesting is capped so a render needs at
// most about 1 MB of stack). A Template is immutable once parsed: cheap to copy and safe to Render from
// several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk::jinja {

struct TemplateAst;

struct Span {
  std::string text;
  bool from_template;  // false: the bytes come from the context (data)
};

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also bounds every string the template builds
  uint64_t max_steps = 50'000'000;             // statements and expressions evaluated
  int max_call_depth = 100;                    // nested macro calls (recursion)
  // Wall clock, for the work inside a step that the step count cannot see: a step may scan a
  // string or list of many MB (s[i], x in list, select over a list), so steps alone do not
  // bound the time. 50M plain steps take about 5 s on one core.
  double max_seconds = 20;
};

struct RenderOptions {
  RenderLimits limits;
  // Top-level context keys whose values count as template text rather than data, e.g.
  // {"bos_token", "eos_token"} when the caller itself supplies those special tokens.
  std::vector<std::string> template_keys;
};

class Template {
 public:
  // `name` starts every error message: "chat template line 12: unknown filter 'xmlattr'".
  static Result<Template> Parse(std::string_view source, std::string name = "chat template");

  // The context's top-level keys are the template's variables (messages, tools,
  // add_generation_prompt, bos_token, ...). Adjacent spans of one origin are merged.
  Result<std::vector<Span>> Render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  Template() = default;
  std::shared_ptr<const TemplateAst> ast_;
  std::string name_;
};

std::string JoinSpans(const std::vector<Span>& spans);

}  // namespace gk::jinja
