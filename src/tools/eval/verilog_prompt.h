// The prompt and the code extraction of the reference case's verilog-eval run
// (shared/spec/verilog-eval.md §3.2, §3.3), kept faithful, quirks included.
#pragma once

#include <string>

namespace gk::eval {

// The single user turn: the problem text stripped, a blank line, then the fixed hints (name
// the module TopModule; use the exact port names; declare signals assigned in always blocks as
// reg, not wire; assign array elements one at a time; output only Verilog inside a ```verilog
// fenced block). The caller applies the chat template (no system message).
std::string BuildVerilogPrompt(const std::string& problem_text);

// The first ```verilog / ```systemverilog / ```sv / ``` fenced block (tags case-sensitive, so
// "```Verilog" leaves "Verilog" as the first code line, as the reference harness did), stripped;
// without a closed fence: a leading opening fence (and a trailing ```) removed; else the text.
std::string ExtractVerilog(const std::string& response);

}  // namespace gk::eval
