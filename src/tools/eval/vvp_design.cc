#include "tools/eval/vvp_design.h"

#include <cctype>
#include <map>

namespace gk::eval {

namespace {

// A cursor over one line of the assembly.
struct Cursor {
  std::string_view s;
  size_t i = 0;

  void SkipSpace() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  bool Eat(std::string_view token) {
    SkipSpace();
    if (s.substr(i, token.size()) != token) return false;
    i += token.size();
    return true;
  }
  std::string Word() {  // up to a space, comma or semicolon
    SkipSpace();
    const size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != ',' && s[i] != ';' && s[i] != '\t') ++i;
    return std::string(s.substr(start, i - start));
  }
  bool Quoted(std::string* out) {  // "..." with backslash escapes
    SkipSpace();
    if (i >= s.size() || s[i] != '"') return false;
    out->clear();
    for (++i; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        out->push_back(s[++i]);
      } else if (s[i] == '"') {
        ++i;
        return true;
      } else {
        out->push_back(s[i]);
      }
    }
    return false;
  }
  bool Number(int* v) {
    SkipSpace();
    const size_t start = i;
    long long x = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && x < (1 << 30)) x = x * 10 + (s[i++] - '0');
    *v = static_cast<int>(x);
    return i > start;
  }
};

}  // namespace

VvpDesign ParseVvp(std::string_view text) {
  VvpDesign d;
  std::vector<int> scope_files, call_files;  // file indices, resolved once the table is read
  std::map<std::string, std::string> type_of;  // scope id -> type name
  std::string declaring;                       // the scope whose declarations follow
  std::string running;                         // the scope of the thread code that follows
  bool declaring_unit = false;
  int file_table_left = -1;

  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    Cursor c{line};

    if (file_table_left > 0) {
      std::string name;
      if (c.Quoted(&name)) {
        d.files.push_back(name);
        --file_table_left;
      }
      continue;
    }
    if (line.starts_with(":file_names")) {
      c.i = 11;
      c.Number(&file_table_left);
      continue;
    }
    if (line.starts_with("S_")) {  // S_0x.. .scope kind, "name" "type" F L[, F L 0, S_parent];
      VvpScope sc;
      sc.id = c.Word();
      if (!c.Eat(".scope")) continue;
      sc.kind = c.Word();
      c.Eat(",");
      if (!c.Quoted(&sc.name) || !c.Quoted(&sc.type)) continue;
      int file = 0, line_no = 0;
      c.Number(&file);
      c.Number(&line_no);
      sc.root = true;
      if (c.Eat(",")) {  // instantiated: the definition's place follows, then the parent
        int def_file = 0, def_line = 0, zero = 0;
        if (c.Number(&def_file) && c.Number(&def_line)) {
          file = def_file;
          line_no = def_line;
        }
        c.Number(&zero);
        sc.root = !c.Eat(",");
      }
      sc.line = line_no;
      declaring = sc.id;
      declaring_unit = sc.kind == "package" && sc.name == "$unit";
      type_of[sc.id] = sc.type;
      d.scopes.push_back(sc);
      scope_files.push_back(file);
      continue;
    }
    c.SkipSpace();
    const std::string_view rest = line.substr(c.i);
    if (rest.starts_with(".scope ")) {  // the thread code that follows runs in this scope
      c.Eat(".scope");
      running = c.Word();
      continue;
    }
    if (rest.starts_with("%vpi_call") || rest.starts_with("%vpi_func")) {
      c.Word();  // the opcode
      VvpLocated call;
      int file = 0;
      c.Number(&file);
      c.Number(&call.line);
      if (!c.Quoted(&call.what)) continue;
      call.scope = type_of.count(running) ? type_of[running] : "";
      d.system_calls.push_back(call);
      call_files.push_back(file);
      continue;
    }
    if (rest.starts_with("%force") || rest.starts_with("%release")) {
      d.forces.push_back({c.Word(), "", 0, type_of.count(running) ? type_of[running] : ""});
      continue;
    }
    if (line.starts_with("I") && line.find(" .island") != std::string_view::npos) {
      d.switch_islands.push_back({std::string(rest), "", 0, type_of.count(declaring) ? type_of[declaring] : ""});
      continue;
    }
    if (declaring_unit && line.starts_with("v")) {
      const std::string id = c.Word();
      const std::string kind = c.Word();  // .var, .net, .array, ...
      std::string name;
      c.Quoted(&name);
      if (kind.starts_with(".var") || kind.starts_with(".net") || kind.starts_with(".array")) {
        d.unit_variables.push_back({name, "", 0, "$unit"});
      }
    }
  }

  // File indices point into the table at the end of the assembly.
  auto file_name = [&](int index) { return index >= 0 && index < static_cast<int>(d.files.size()) ? d.files[index] : ""; };
  for (size_t i = 0; i < d.scopes.size(); ++i) d.scopes[i].file = file_name(scope_files[i]);
  for (size_t i = 0; i < d.system_calls.size(); ++i) d.system_calls[i].file = file_name(call_files[i]);
  return d;
}

}  // namespace gk::eval
