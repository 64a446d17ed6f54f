#include "formats/chat_renderer.h"

#include <filesystem>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {

namespace {

// Context keys the caller sets; chat_template_kwargs may not replace them (a kwarg named
// bos_token would otherwise be data the template prints where it expects the marker).
constexpr const char* kReservedKeys[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};

}  // namespace

Result<ChatRenderer> ChatRenderer::Parse(const ChatTemplateSource& source) {
  GK_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source.text, source.origin));
  return ChatRenderer(std::move(t), source.origin);
}

Result<std::vector<jinja::Span>> ChatRenderer::Render(const ChatRenderInput& input, const std::string& bos_token,
                                                      const std::string& eos_token) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = input.messages;
  if (!input.tools.is_null()) context["tools"] = input.tools;
  context["add_generation_prompt"] = input.add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  if (!input.kwargs.is_null()) {
    if (!input.kwargs.is_object()) return Result<std::vector<jinja::Span>>::Error("chat_template_kwargs must be an object");
    for (const auto& [key, value] : input.kwargs.items()) {
      for (const char* reserved : kReservedKeys) {
        if (key == reserved) {
          return Result<std::vector<jinja::Span>>::Error(StrCat("chat_template_kwargs may not set '", key, "'"));
        }
      }
      context[key] = value;
    }
  }
  jinja::RenderOptions options;
  options.template_keys = {"bos_token", "eos_token"};
  return template_.Render(context, options);
}

Result<std::vector<int32_t>> ChatRenderer::Apply(const Tokenizer& tokenizer, const ChatRenderInput& input) const {
  const std::string bos = tokenizer.bos_id() >= 0 ? tokenizer.Piece(tokenizer.bos_id()) : "";
  const std::string eos = tokenizer.eos_id() >= 0 ? tokenizer.Piece(tokenizer.eos_id()) : "";
  GK_ASSIGN_OR_RETURN(std::vector<jinja::Span> spans, Render(input, bos, eos));
  std::string text;
  std::vector<std::pair<size_t, size_t>> template_ranges;
  for (const jinja::Span& s : spans) {
    if (s.from_template) template_ranges.emplace_back(text.size(), text.size() + s.text.size());
    text += s.text;
  }
  return tokenizer.EncodeWithSpecialRanges(text, template_ranges);
}

Result<std::optional<ChatTemplateSource>> FindChatTemplate(const std::string& model_dir, const std::string& name) {
  using Found = Result<std::optional<ChatTemplateSource>>;
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  if (name.empty() && std::filesystem::exists(jinja_path)) {
    GK_ASSIGN_OR_RETURN(std::string text, ReadFile(jinja_path));
    return std::optional<ChatTemplateSource>(ChatTemplateSource{std::move(text), jinja_path});
  }
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) {
    if (!name.empty()) return Found::Error(StrCat(model_dir, " has no tokenizer_config.json with named chat templates"));
    return std::optional<ChatTemplateSource>();
  }
  GK_ASSIGN_OR_RETURN(std::string config_text, ReadFile(config_path));
  GK_ASSIGN_OR_RETURN(nlohmann::ordered_json config, ParseOrderedJson(config_text, config_path));
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
    if (!name.empty()) return Found::Error(StrCat(config_path, " has no chat template named '", name, "'"));
    return std::optional<ChatTemplateSource>();
  }
  const nlohmann::ordered_json& t = config["chat_template"];
  if (t.is_string()) {
    if (!name.empty()) return Found::Error(StrCat(config_path, " has one chat template, not one named '", name, "'"));
    return std::optional<ChatTemplateSource>(ChatTemplateSource{t.get<std::string>(), config_path});
  }
  if (!t.is_array()) return Found::Error(StrCat(config_path, ": chat_template is neither a string nor a list"));
  const std::string want = name.empty() ? "default" : name;
  std::vector<std::string> names;
  for (const auto& entry : t) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string()) {
      return Found::Error(StrCat(config_path, ": a chat_template entry is not {\"name\", \"template\"}"));
    }
    names.push_back(entry["name"].get<std::string>());
    if (names.back() == want) {
      return std::optional<ChatTemplateSource>(
          ChatTemplateSource{entry["template"].get<std::string>(), StrCat(config_path, " (", want, ")")});
    }
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Found::Error(StrCat(config_path, " has no chat template named '", want, "' (it has: ", list, ")"));
}

}  // namespace gk
