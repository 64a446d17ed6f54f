// What a compiled design contains, read from the vvp assembly that iverilog writes with
// `-o a.out` (a text format: scopes, nets, threads of opcodes; the file table at the end). The
// verilog-eval harness uses it to see what a candidate module does after the preprocessor and
// elaboration, where no spelling trick (macros, escaped names, generate blocks) hides anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gk::eval {

struct VvpScope {
  std::string id;          // "S_0x55..."
  std::string kind;        // "module", "package", "task", "autofunction.vec2.u32", ...
  std::string name, type;  // instance name and module (or scope) type
  std::string file;        // where it is defined
  int line = 0;
  bool root = false;       // a top-level scope (no parent)
};

struct VvpLocated {
  std::string what;  // "$display" for a call, the opcode ("%force/vec4") or declaration for the rest
  std::string file;  // "" when the assembly does not say
  int line = 0;
  std::string scope;  // the enclosing scope's type name, e.g. "TopModule"
};

struct VvpDesign {
  std::vector<std::string> files;           // the :file_names table
  std::vector<VvpScope> scopes;
  std::vector<VvpLocated> system_calls;     // %vpi_call and %vpi_func: system tasks and functions
  std::vector<VvpLocated> forces;           // %force/... and %release/...
  std::vector<VvpLocated> switch_islands;   // .island: tran / rtran / tranif* nets, bidirectional
  std::vector<VvpLocated> unit_variables;   // variables and nets declared in $unit, outside modules
};

// Never fails: lines it does not know are skipped.
VvpDesign ParseVvp(std::string_view text);

}  // namespace gk::eval
