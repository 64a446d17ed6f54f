#include "formats/gemma4_tokens.h"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/guarded_parse.h"

namespace gk {
namespace {

using ojson = nlohmann::ordered_json;

constexpr Gemma4ControlToken kTokens[] = {
    {46, "<|tool>", "<unused40>"},
    {47, "<tool|>", "<unused41>"},
    {48, "<|tool_call>", "<unused42>"},
    {49, "<tool_call|>", "<unused43>"},
    {50, "<|tool_response>", "<unused44>"},
    {51, "<tool_response|>", "<unused45>"},
    {52, "<|\"|>", "<unused46>"},
    {98, "<|think|>", "<unused92>"},
    {100, "<|channel>", "<unused94>"},
    {101, "<channel|>", "<unused95>"},
    {105, "<|turn>", "<start_of_turn>"},
    {106, "<turn|>", "<end_of_turn>"},
    {255999, "<|image>", "<start_of_image>"},
    {256000, "<|audio>", "<end_of_image>"},
    {258880, "<|image|>", "<unused2978>"},
    {258881, "<|audio|>", "<unused2979>"},
    {258882, "<image|>", "<unused2980>"},
    {258883, "<audio|>", "<unused2981>"},
    {258884, "<|video|>", "<unused2982>"},
};

// Gemma 3 names of config fields whose meaning moves to a Gemma 4 token (not always the same
// slot: the end-of-image marker moves from 256000 to 258882).
constexpr std::pair<std::string_view, std::string_view> kConfigNames[] = {
    {"<start_of_turn>", "<|turn>"},     {"<end_of_turn>", "<turn|>"},
    {"<start_of_image>", "<|image>"},   {"<end_of_image>", "<image|>"},
    {"<image_soft_token>", "<|image|>"},
};

// The chat template `gemmakit init` writes: our own Jinja, rendering byte for byte what the
// official Gemma 4 31B template (gemma-4-31B-it.jinja) renders for what the OpenAI API sends:
// system/developer text, thinking on or off, string or text-part content (model text without its
// <|channel>...<channel|> thoughts), tools as `<|tool>declaration:...<tool|>` in the system turn,
// assistant tool_calls (arguments a mapping or a string) with their reasoning when after the last
// user message, the following role "tool" messages as `<|tool_response>` blocks named through
// tool_call_id (also the legacy tool_responses field), and the generation prompt. Image, audio and
// video parts are not rendered. Checked against the official template with jinja2 by
// tests/chat_template/init_template_test.py, and against RenderGemma4ChatText for plain turns by
// src/formats/jinja/fixtures_test.cc.
constexpr std::string_view kChatTemplate = R"JINJA({#- gemmakit's Gemma 4 chat template, written by `gemmakit init`. Every tag trims both sides, so
    only what output expressions print reaches the prompt. -#}
{#- A value in Gemma 4's tool syntax: <|"|>-quoted strings, true/false, keys sorted (quoted or bare). -#}
{%- macro gk_value(v, quote_keys) -%}
  {%- if v is string -%}
    {{- '<|"|>' + v + '<|"|>' -}}
  {%- elif v is boolean -%}
    {{- 'true' if v else 'false' -}}
  {%- elif v is mapping -%}
    {{- '{' -}}
    {%- for key, item in v | dictsort -%}
      {{- ('' if loop.first else ',') + ('<|"|>' + key + '<|"|>' if quote_keys else key) + ':' + gk_value(item, quote_keys) -}}
    {%- endfor -%}
    {{- '}' -}}
  {%- elif v is sequence -%}
    {{- '[' -}}
    {%- for item in v -%}
      {{- ('' if loop.first else ',') + gk_value(item, quote_keys) -}}
    {%- endfor -%}
    {{- ']' -}}
  {%- else -%}
    {{- v -}}
  {%- endif -%}
{%- endmacro -%}
{#- Names in a list: <|"|>a<|"|>,<|"|>b<|"|> -#}
{%- macro gk_names(names) -%}
  {%- for name in names -%}
    {{- ('' if loop.first else ',') ~ '<|"|>' ~ name ~ '<|"|>' -}}
  {%- endfor -%}
{%- endmacro -%}
{#- JSON-schema properties, sorted: name:{description,enum|items,nullable,properties,required,type}.
    Properties named like those five keywords are left out; an object schema without a
    `properties` mapping lists its own other keywords as its properties. -#}
{%- macro gk_properties(props) -%}
  {%- for name, schema in props | dictsort if name not in ['description', 'type', 'properties', 'required', 'nullable'] -%}
    {%- set kind = schema['type'] | upper -%}
    {{- ('' if loop.first else ',') ~ name ~ ':{' -}}
    {%- if schema['description'] -%}
      {{- 'description:<|"|>' ~ schema['description'] ~ '<|"|>,' -}}
    {%- endif -%}
    {%- if kind == 'STRING' and schema['enum'] -%}
      {{- 'enum:' + gk_value(schema['enum'], true) + ',' -}}
    {%- elif kind == 'ARRAY' and schema['items'] is mapping and schema['items'] -%}
      {{- 'items:{' + gk_items(schema['items']) + '},' -}}
    {%- endif -%}
    {%- if schema['nullable'] -%}
      {{- 'nullable:true,' -}}
    {%- endif -%}
    {%- if kind == 'OBJECT' -%}
      {{- 'properties:{' + gk_properties(schema['properties'] if schema['properties'] is mapping else schema) + '},' -}}
      {%- if schema['required'] -%}
        {{- 'required:[' + gk_names(schema['required']) + '],' -}}
      {%- endif -%}
    {%- endif -%}
    {{- 'type:<|"|>' ~ kind ~ '<|"|>}' -}}
  {%- endfor -%}
{%- endmacro -%}
{#- An array's item schema: its non-null keywords, sorted. -#}
{%- macro gk_items(items) -%}
  {%- for key, item in items | dictsort if item is not none -%}
    {{- '' if loop.first else ',' -}}
    {%- if key == 'properties' -%}
      {{- 'properties:{' + (gk_properties(item) if item is mapping else '') + '}' -}}
    {%- elif key == 'required' -%}
      {{- 'required:[' + gk_names(item) + ']' -}}
    {%- elif key == 'type' -%}
      {{- 'type:' + gk_value(item | upper if item is string else item | map('upper') | list, true) -}}
    {%- else -%}
      {{- key ~ ':' ~ gk_value(item, true) -}}
    {%- endif -%}
  {%- endfor -%}
{%- endmacro -%}
{#- An OpenAI function tool's `function`. -#}
{%- macro gk_declaration(fn) -%}
  {{- 'declaration:' ~ fn['name'] ~ '{description:<|"|>' ~ fn['description'] ~ '<|"|>' -}}
  {%- set params = fn['parameters'] -%}
  {%- if params -%}
    {{- ',parameters:{' -}}
    {%- if params['properties'] -%}
      {{- 'properties:{' + gk_properties(params['properties']) + '},' -}}
    {%- endif -%}
    {%- if params['required'] -%}
      {{- 'required:[' + gk_names(params['required']) + '],' -}}
    {%- endif -%}
    {%- if params['type'] -%}
      {{- 'type:<|"|>' ~ params['type'] | upper ~ '<|"|>}' -}}
    {%- endif -%}
  {%- endif -%}
  {%- if 'response' in fn -%}
    {{- ',response:{' -}}
    {%- if fn['response']['description'] -%}
      {{- 'description:<|"|>' ~ fn['response']['description'] ~ '<|"|>,' -}}
    {%- endif -%}
    {%- if fn['response']['type'] | upper == 'OBJECT' -%}
      {{- 'type:<|"|>OBJECT<|"|>}' -}}
    {%- endif -%}
  {%- endif -%}
  {{- '}' -}}
{%- endmacro -%}
{#- One tool result: a mapping keeps its keys, anything else is the value. -#}
{%- macro gk_tool_result(name, body) -%}
  {{- '<|tool_response>response:' + name + (gk_value(body, false) if body is mapping else '{value:' + gk_value(body, false) + '}') + '<tool_response|>' -}}
{%- endmacro -%}
{#- The text parts of a tool message, joined. -#}
{%- macro gk_joined_text(parts) -%}
  {%- for part in parts if part.get('type') == 'text' -%}
    {{- '' + (part.get('text') | default('')) -}}
  {%- endfor -%}
{%- endmacro -%}
{#- Model text without its <|channel>...<channel|> thoughts. -#}
{%- macro gk_visible(text) -%}
  {%- set acc = namespace(text='') -%}
  {%- for piece in text.split('<channel|>') -%}
    {%- set acc.text = acc.text + piece.split('<|channel>')[0] -%}
  {%- endfor -%}
  {{- acc.text | trim -}}
{%- endmacro -%}
{#- A message's content: a string or text parts, each trimmed (image, audio and video parts are
    not rendered). -#}
{%- macro gk_content(content, is_model) -%}
  {%- if content is string -%}
    {{- gk_visible(content) if is_model else content | trim -}}
  {%- elif content is sequence -%}
    {%- for part in content if part['type'] == 'text' -%}
      {{- gk_visible(part['text']) if is_model else part['text'] | trim -}}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- set thinking = enable_thinking is defined and enable_thinking -%}
{%- set has_system = messages[0]['role'] in ['system', 'developer'] -%}
{%- set turns = messages[1:] if has_system else messages -%}
{#- The system turn: the thinking switch, the system text and the tool declarations. -#}
{%- if thinking or tools or has_system -%}
  {{- '<|turn>system\n' -}}
  {%- if thinking -%}
    {{- '<|think|>\n' -}}
  {%- endif -%}
  {%- if has_system -%}
    {{- messages[0]['content'] | trim -}}
  {%- endif -%}
  {%- for tool in tools or [] -%}
    {{- '<|tool>' + gk_declaration(tool['function']) + '<tool|>' -}}
  {%- endfor -%}
  {{- '<turn|>\n' -}}
{%- endif -%}
{#- Tool messages are rendered inside the model turn whose calls they answer; an assistant message
    after an assistant message (tool messages between them) continues its model turn. -#}
{%- set st = namespace(prev_role=none, answered=false, awaiting=false) -%}
{%- for message in turns -%}
  {%- if message['role'] != 'tool' -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {%- set calls = message.get('tool_calls') -%}
    {%- if not (role == 'model' and st.prev_role == 'assistant') -%}
      {{- '<|turn>' + role + '\n' -}}
    {%- endif -%}
    {%- set st.prev_role = message['role'] -%}
    {#- Reasoning is shown only for tool-calling turns after the last user message. -#}
    {%- set reasoning = message.get('reasoning') or message.get('reasoning_content') -%}
    {%- if reasoning and calls and 'user' not in turns[loop.index0:] | map(attribute='role') | list -%}
      {{- '<|channel>thought\n' + reasoning + '\n<channel|>' -}}
    {%- endif -%}
    {%- for call in calls or [] -%}
      {%- set args = call['function']['arguments'] -%}
      {{- '<|tool_call>call:' + call['function']['name'] + (gk_value(args, false) if args is mapping else '{' + (args if args is string else '') + '}') + '<tool_call|>' -}}
    {%- endfor -%}
    {#- The results: the message's own tool_responses, else the tool messages right after it, each
        named by the call its tool_call_id names. -#}
    {%- set st.answered = false -%}
    {%- if message.get('tool_responses') -%}
      {%- for result in message['tool_responses'] -%}
        {{- gk_tool_result(result['name'] | default('unknown'), result['response']) -}}
      {%- endfor -%}
      {%- set st.answered = true -%}
    {%- elif calls -%}
      {%- for result in turns[loop.index0 + 1:] -%}
        {%- if result['role'] != 'tool' -%}
          {%- break -%}
        {%- endif -%}
        {%- set named = namespace(name=result.get('name')) -%}
        {%- for call in calls if call.get('id') == result.get('tool_call_id') -%}
          {%- set named.name = call['function']['name'] -%}
        {%- endfor -%}
        {%- set body = result.get('content') -%}
        {{- gk_tool_result(named.name, gk_joined_text(body) if body is sequence and body is not string else body) -}}
        {%- set st.answered = true -%}
      {%- endfor -%}
    {%- endif -%}
    {{- gk_content(message['content'], role == 'model') -}}
    {#- Calls without results wait for them; results without text leave the turn open. -#}
    {%- if calls and not st.answered -%}
      {{- '<|tool_response>' -}}
    {%- elif not (st.answered and not message.get('content')) -%}
      {{- '<turn|>\n' -}}
    {%- endif -%}
    {%- set st.awaiting = calls or message.get('tool_responses') -%}
  {%- endif -%}
{%- endfor -%}
{#- No generation prompt while the last model turn waits for tool results. -#}
{%- if add_generation_prompt and not st.awaiting -%}
  {{- '<|turn>model\n' -}}
  {%- if not thinking -%}
    {{- '<|channel>thought\n<channel|>' -}}
  {%- endif -%}
{%- endif -%}
)JINJA";

// Checks that a slot holds the Gemma 3 (or already the Gemma 4) name.
Status CheckSlot(const Gemma4ControlToken& t, const std::string& actual, const char* where) {
  if (actual == t.gemma3_name || actual == t.gemma4_name) return Status::Ok();
  return Status::Error(StrCat(where, " id ", t.id, " is \"", actual, "\", expected \"", t.gemma3_name,
                              "\" (Gemma 3) or \"", t.gemma4_name,
                              "\" (Gemma 4); pass a Gemma 3 tokenizer"));
}

ojson AddedTokenEntry(int32_t id, std::string_view content) {
  ojson e = ojson::object();
  if (id >= 0) e["id"] = id;
  e["content"] = std::string(content);
  e["single_word"] = false;
  e["lstrip"] = false;
  e["rstrip"] = false;
  e["normalized"] = false;
  e["special"] = true;
  return e;
}

// Renames the slots in the vocab captured in file order.
Status RenameVocab(std::vector<std::pair<std::string, int64_t>>& vocab) {
  for (auto& [piece, id] : vocab) {
    const Gemma4ControlToken* t = FindGemma4ControlToken(piece);
    if (t != nullptr && t->id != id) {
      return Status::Error(StrCat("tokenizer.json model.vocab already has \"", piece, "\" at id ", id,
                                  " instead of ", t->id, "; not a Gemma 3 tokenizer"));
    }
  }
  for (const Gemma4ControlToken& t : kTokens) {
    auto it = std::find_if(vocab.begin(), vocab.end(), [&](const auto& e) { return e.second == t.id; });
    if (it == vocab.end()) {
      return Status::Error(StrCat("tokenizer.json model.vocab has no id ", t.id,
                                  "; expected a 262144-piece Gemma 3 vocabulary"));
    }
    GK_RETURN_IF_ERROR(CheckSlot(t, it->first, "tokenizer.json model.vocab"));
    it->first = std::string(t.gemma4_name);
  }
  std::erase_if(vocab, [](const auto& e) { return e.second >= kGemma4VocabSize; });
  return Status::Ok();
}

Status RenameAddedTokens(ojson& added) {
  if (!added.is_array()) return Status::Error("tokenizer.json added_tokens is missing or not an array");
  for (const Gemma4ControlToken& t : kTokens) {
    auto it = std::find_if(added.begin(), added.end(), [&](const ojson& e) {
      return e.is_object() && e.value("id", int64_t{-1}) == t.id;
    });
    if (it == added.end()) {
      added.push_back(AddedTokenEntry(t.id, t.gemma4_name));
      continue;
    }
    GK_RETURN_IF_ERROR(CheckSlot(t, it->value("content", std::string()), "tokenizer.json added_tokens"));
    (*it)["content"] = std::string(t.gemma4_name);
    (*it)["special"] = true;
  }
  ojson kept = ojson::array();
  for (ojson& e : added) {
    if (e.value("id", int64_t{0}) < kGemma4VocabSize) kept.push_back(std::move(e));
  }
  std::stable_sort(kept.begin(), kept.end(), [](const ojson& a, const ojson& b) {
    return a.value("id", int64_t{0}) < b.value("id", int64_t{0});
  });
  added = std::move(kept);
  return Status::Ok();
}

}  // namespace

std::span<const Gemma4ControlToken> Gemma4ControlTokens() { return kTokens; }

const Gemma4ControlToken* FindGemma4ControlToken(std::string_view gemma4_name) {
  for (const Gemma4ControlToken& t : kTokens) {
    if (t.gemma4_name == gemma4_name) return &t;
  }
  return nullptr;
}

namespace {

Result<std::string> RenameToGemma4TokensUnguarded(const std::string& gemma3_tokenizer_json) {
  // model.vocab (262k keys) is captured as it streams past: an ordered_json object would make
  // each insert a linear scan. Everything else keeps its key order.
  std::vector<std::pair<std::string, int64_t>> vocab;
  bool bad_vocab = false;
  std::string key;
  std::vector<std::string> path(4);
  auto callback = [&](int depth, ojson::parse_event_t event, ojson& parsed) {
    if (event == ojson::parse_event_t::key && depth <= 3) {
      path[depth] = parsed.get<std::string>();
      // A kept key is inserted into the object before its value is seen: discard vocab keys.
      return !(depth == 3 && path[1] == "model" && path[2] == "vocab");
    }
    if (depth == 3 && event == ojson::parse_event_t::value && path[1] == "model" && path[2] == "vocab") {
      bad_vocab = bad_vocab || !parsed.is_number_integer();
      vocab.emplace_back(path[3], parsed.is_number_integer() ? parsed.get<int64_t>() : -1);
      return false;
    }
    return true;
  };
  GK_ASSIGN_OR_RETURN(ojson root, ParseOrderedJson(gemma3_tokenizer_json, "tokenizer.json", callback));
  if (root.is_discarded() || !root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    return Status::Error("tokenizer.json is not valid JSON with a \"model\" object");
  }
  if (bad_vocab || vocab.empty()) {
    return Status::Error("tokenizer.json model.vocab is missing or has a non-integer id");
  }
  GK_RETURN_IF_ERROR(RenameVocab(vocab));
  GK_RETURN_IF_ERROR(RenameAddedTokens(root["added_tokens"]));

  // Dump with a placeholder for the vocab, then splice the vocab text in, in its original order.
  const std::string placeholder = "@@gemmakit-vocab-placeholder@@";
  root["model"]["vocab"] = placeholder;
  std::string text = root.dump(-1, ' ', false, ojson::error_handler_t::replace);
  const std::string quoted = "\"" + placeholder + "\"";
  const size_t at = text.find(quoted);
  if (at == std::string::npos || text.find(quoted, at + 1) != std::string::npos) {
    return Status::Error("tokenizer.json contains gemmakit's vocab placeholder text; cannot rewrite it");
  }
  std::string vocab_text = "{";
  vocab_text.reserve(vocab.size() * 16);
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (i) vocab_text += ',';
    vocab_text += ojson(vocab[i].first).dump(-1, ' ', false, ojson::error_handler_t::replace);
    vocab_text += ':';
    vocab_text += std::to_string(vocab[i].second);
  }
  vocab_text += '}';
  text.replace(at, quoted.size(), vocab_text);
  return text;
}

Result<std::string> RenameToGemma4TokenizerConfigUnguarded(const std::string& gemma3_config_json) {
  GK_ASSIGN_OR_RETURN(ojson c, ParseOrderedJson(gemma3_config_json, "tokenizer_config.json"));
  if (!c.is_object()) {
    return Status::Error("tokenizer_config.json is not a valid JSON object");
  }
  if (c.contains("added_tokens_decoder")) {
    ojson& dec = c["added_tokens_decoder"];
    if (!dec.is_object()) return Status::Error("tokenizer_config.json added_tokens_decoder is not an object");
    for (const Gemma4ControlToken& t : kTokens) {
      const std::string id = std::to_string(t.id);
      if (!dec.contains(id)) {
        ojson e = AddedTokenEntry(-1, t.gemma4_name);
        dec[id] = std::move(e);
        continue;
      }
      GK_RETURN_IF_ERROR(CheckSlot(t, dec[id].value("content", std::string()),
                                   "tokenizer_config.json added_tokens_decoder"));
      dec[id]["content"] = std::string(t.gemma4_name);
      dec[id]["special"] = true;
    }
    ojson kept = ojson::object();
    for (auto& [id, entry] : dec.items()) {
      if (std::atoll(id.c_str()) < kGemma4VocabSize) kept[id] = std::move(entry);
    }
    dec = std::move(kept);
  }
  auto rename = [](ojson& v) {
    for (const auto& [from, to] : kConfigNames) {
      if (v.is_string() && v.get<std::string>() == from) v = std::string(to);
    }
  };
  for (auto& [key, value] : c.items()) {
    if (key != "chat_template") rename(value);
  }
  if (c.contains("extra_special_tokens") && c["extra_special_tokens"].is_object()) {
    for (auto& [key, value] : c["extra_special_tokens"].items()) rename(value);
  }
  c["add_bos_token"] = false;
  c["chat_template"] = std::string(Gemma4InitChatTemplate());
  return c.dump(2, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

// Both files are outside input (util/guarded_parse.h): e.g. an added_tokens_decoder entry that is
// not an object makes nlohmann's value() throw.
Result<std::string> RenameToGemma4Tokens(const std::string& gemma3_tokenizer_json) {
  return GuardedParse("tokenizer.json", [&] { return RenameToGemma4TokensUnguarded(gemma3_tokenizer_json); });
}

Result<std::string> RenameToGemma4TokenizerConfig(const std::string& gemma3_config_json) {
  return GuardedParse("tokenizer_config.json",
                      [&] { return RenameToGemma4TokenizerConfigUnguarded(gemma3_config_json); });
}

std::string_view Gemma4InitChatTemplate() { return kChatTemplate; }

}  // namespace gk
