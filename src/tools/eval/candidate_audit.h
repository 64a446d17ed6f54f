// What a verilog-eval candidate may contain. A candidate is compiled together with the
// testbench that judges it, so it must affect that testbench only through TopModule's ports.
// The harness compiles the candidate a second time on its own (its own modules only, nothing
// else readable) and checks the result here; what fails is the category forbidden_construct:
//  - system tasks and functions outside a list of pure ones (printing, math, sizes, time):
//    nothing that ends or steers the simulation ($finish, $stop, $fatal, $random, ...) or
//    touches files ($fopen, $readmemh, $dumpvars, ...);
//  - force / release, which override a net the module shares with the testbench (an input
//    port forced to X makes the reference's outputs X, and X in the reference matches anything);
//  - bidirectional switches (tran, rtran, tranif*, rtranif*), which drive input ports back;
//  - variables and nets declared outside any module, in the compilation unit the testbench
//    shares.
#pragma once

#include <string>
#include <string_view>

#include "tools/eval/vvp_design.h"

namespace gk::eval {

// "" when the design may be simulated, else one line naming the construct and its place, e.g.
// "TopModule.sv:6: $finish ends the simulation".
std::string AuditCandidate(const VvpDesign& candidate_alone);

// True for a system task or function a design may call ("$display", "$clog2", ...).
bool SystemCallAllowed(std::string_view name);

}  // namespace gk::eval
