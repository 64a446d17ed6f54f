// Test driver for tests/chat_template/oracle_test.py: renders one template over a JSON array of
// contexts with gk::jinja and prints a JSON array of results, one per context:
//   {"ok": true, "text": "...", "spans": [["<|turn>", true], ["user", false], ...]}
//   {"ok": false, "error": "chat template line 3: ..."}
// A template that does not parse prints {"parse_error": "..."} instead.
//
//   jinja_render TEMPLATE_FILE CONTEXTS_JSON_FILE
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/jinja/jinja.h"

namespace {

bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using Json = nlohmann::ordered_json;
  if (argc != 3) {
    std::fprintf(stderr, "usage: jinja_render TEMPLATE_FILE CONTEXTS_JSON_FILE\n");
    return 2;
  }
  std::string source, contexts_text;
  if (!ReadFile(argv[1], &source) || !ReadFile(argv[2], &contexts_text)) {
    std::fprintf(stderr, "jinja_render: cannot read %s or %s\n", argv[1], argv[2]);
    return 2;
  }
  const Json contexts = Json::parse(contexts_text, nullptr, false);
  if (!contexts.is_array()) {
    std::fprintf(stderr, "jinja_render: %s is not a JSON array\n", argv[2]);
    return 2;
  }
  const auto dump = [](const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); };
  gk::Result<gk::jinja::Template> parsed = gk::jinja::Template::Parse(source);
  if (!parsed.ok()) {
    std::cout << dump(Json{{"parse_error", parsed.message()}}) << "\n";
    return 0;
  }
  Json results = Json::array();
  for (const Json& context : contexts) {
    gk::Result<std::vector<gk::jinja::Span>> spans = parsed->Render(context);
    if (!spans.ok()) {
      results.push_back(Json{{"ok", false}, {"error", spans.message()}});
      continue;
    }
    Json span_list = Json::array();
    for (const auto& span : *spans) span_list.push_back(Json::array({span.text, span.from_template}));
    results.push_back(Json{{"ok", true}, {"text", gk::jinja::JoinSpans(*spans)}, {"spans", span_list}});
  }
  std::cout << dump(results) << "\n";
  return 0;
}
