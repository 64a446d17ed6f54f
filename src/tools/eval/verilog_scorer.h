// Scores one candidate Verilog module against a verilog-eval problem, as the reference case's
// evaluator did (shared/spec/verilog-eval.md §3.4, §6), safely:
//  - its own scratch directory holding RefModule.sv, TopModule.sv and test.sv;
//  - `iverilog -g2012 -o a.out RefModule.sv TopModule.sv test.sv` (ref, candidate, test), then
//    `vvp -n a.out -none` (no VCD, $stop acts as $finish), stdin /dev/null, each under a wall
//    clock limit; a run that hits the limit is SIGKILLed with its process group and fails,
//    whatever it printed (a killed vvp still runs `final` blocks on SIGTERM: never trust it);
//  - pass only when the testbench's own result line says "Mismatches: 0 in N samples", N > 0.
//    The harness tags the testbench's line with a random nonce before compiling, so a module
//    that prints its own "Mismatches: 0 ..." cannot pass: any untagged "Mismatches:" line, or
//    more than one tagged line, fails the sample as kTampered;
//  - the candidate may affect the testbench only through TopModule's ports: it is compiled a
//    second time on its own (`-s TopModule`, in a directory holding nothing else), which fails
//    for any reference outside its own modules (tb.tb_match, RefModule, $root...), and that
//    design is audited (candidate_audit.h: no $finish, $random, file tasks, force, switches);
//    modules it defines but TopModule never instantiates are not elaborated;
//  - a pass needs the sample count the reference solution gives in the same testbench, when
//    the caller knows it (a run that ends early is incomplete_run);
//  - compiler and simulator run sandboxed (sandbox.h): they cannot write outside the scratch
//    directory, read outside it and the system's directories, or execute other programs.
#pragma once

#include <string>

#include "util/result.h"

namespace gk::eval {

enum class SampleCategory {
  kPass,
  kCompileError,    // iverilog exited non-zero
  kCompileTimeout,
  kRunTimeout,      // vvp killed at the wall-clock limit
  kMismatch,        // the testbench reported E > 0 mismatches (or 0 in 0 samples)
  kNoResult,        // vvp ended without the testbench's result line
  kTampered,        // a result line the testbench did not print
  kForbidden,       // a construct that could steer the testbench (candidate_audit.h)
  kIncompleteRun,   // "Mismatches: 0 in N samples" with N short of the reference's count
};
const char* CategoryName(SampleCategory c);  // "pass", "compile_error", ..., "forbidden_construct"

struct ScoreOptions {
  double compile_timeout_s = 60;
  double run_timeout_s = 60;
  std::string iverilog = "iverilog";  // looked up on PATH when not absolute
  std::string vvp = "vvp";
  std::string scratch_root;           // "": $TMPDIR or /tmp
  bool keep_scratch = false;          // leave the directory for debugging
  bool sandbox = true;                // false only with --unsafe-no-sandbox
};

struct SampleScore {
  SampleCategory category = SampleCategory::kNoResult;
  bool passed = false;
  long long mismatches = -1, samples = -1;  // from the result line; -1 when absent
  std::string reason;                       // one line for forbidden_construct and incomplete_run
  std::string log;                          // compiler and simulator output, at most 4 KiB
  double seconds = 0;                       // wall time of compile + run
};

// Errors are the harness's own (cannot create the scratch directory, iverilog not found, the
// sandbox unavailable), never the candidate's: those are categories.
// expected_samples: the count the reference solution gives in this testbench (from scoring
// ReferenceAsCandidate(ref_sv)), or -1 when unknown.
Result<SampleScore> ScoreSample(const std::string& candidate, const std::string& ref_sv, const std::string& test_sv,
                                const ScoreOptions& options, long long expected_samples = -1);

// The reference solution as a candidate: its `module RefModule` renamed TopModule.
std::string ReferenceAsCandidate(const std::string& ref_sv);

// "Icarus Verilog version 11.0 (stable) ()" or an error saying how to install it.
Result<std::string> IverilogVersion(const ScoreOptions& options);

}  // namespace gk::eval
