// verilog-eval spec-to-RTL problems on disk, found as the reference case's evaluator finds them
// (shared/spec/verilog-eval.md §3.1): the sorted ProbNNN_<name>_prompt.txt files of the dataset
// directory (DIR itself or DIR/dataset_spec-to-rtl), kept when their _ref.sv and _test.sv exist.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace gk::eval {

struct VerilogProblem {
  std::string name;  // "Prob001_zero"
  std::string prompt, ref, test;
};

// only: problem names or ProbNNN prefixes to keep ("Prob001,Prob099_m2014_q6c"); empty keeps all.
// Errors: no such directory, no problems, a name in `only` that matches nothing.
Result<std::vector<VerilogProblem>> LoadVerilogProblems(const std::string& dir, const std::vector<std::string>& only);

}  // namespace gk::eval
