// Synthetic spec-to-RTL tasks for `gemmakit data synth-verilog`: parametrised templates of our
// own (gates, reductions, truth tables, muxes, decoders, priority encoders, adders, comparators,
// bit tricks, barrel shifters, counters, shift registers, sequence detectors, table FSMs, edge
// detectors, registers), each written as a verilog-eval problem (shared/spec/verilog-eval.md
// §1.2-§1.3: prompt, RefModule, self-checking testbench) plus a CodeV-R1 style SFT row (§7.1).
//
// Which tasks: the templates expand into a fixed catalogue of VerilogSynthCatalogueSize()
// distinct tasks. --seed shuffles it (each family shuffled, then the families interleaved, so
// any window mixes all of them), and --first K --n N takes positions K..K+N-1 of that order.
// Windows of one seed never overlap, so a train set and a disjoint eval set are two windows of
// the same seed (e.g. --first 0 --n 1500 and --first 1500 --n 200). Different seeds are
// different orders of the same catalogue and do overlap. A task's files do not depend on the
// seed or its position; only the ProbNNN number (its position + 1) does.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/result.h"

namespace gk::data {

struct VerilogTask {
  std::string name;    // "Prob0001_counter_up_mod12_ena_sr": unique, used for every file name
  std::string family;  // "counter"
  std::string prompt;  // ProbNNN_<name>_prompt.txt: starts like verilog-eval's prompts
  std::string ref;     // ProbNNN_<name>_ref.sv: one module, RefModule
  std::string test;    // ProbNNN_<name>_test.sv: stimulus_gen + tb, prints "Mismatches: E in N samples"
  std::string think;   // the reasoning of the SFT response
};

struct VerilogSynthOptions {
  int64_t n = 0;      // tasks to make, >= 1
  int64_t first = 0;  // position of the first task in the seed's order, >= 0
  uint64_t seed = 0;
};

// Distinct tasks the templates can make, and how many per family (catalogue order).
size_t VerilogSynthCatalogueSize();
std::vector<std::pair<std::string, size_t>> VerilogSynthFamilies();

// Tasks first..first+n-1 of the seed's order. Errors: n < 1, first < 0, or a window that runs
// past the catalogue.
Result<std::vector<VerilogTask>> SynthesizeVerilogTasks(const VerilogSynthOptions& options);

// The reference renamed to `module TopModule` (each reference holds exactly one module).
std::string RenameToTopModule(const std::string& ref);

// The system message of every SFT row.
extern const char kVerilogSftSystem[];
// One JSON object (no trailing newline): {"system", "prompt", "response"}, where prompt is the
// task's prompt text stripped and response is
// "<think>\n...\n</think>\n<answer>\n```verilog\n<reference as TopModule>```\n</answer>".
std::string VerilogSftRow(const VerilogTask& task);

// Writes out_dir/dataset_spec-to-rtl/{<name>_prompt.txt, <name>_ref.sv, <name>_test.sv,
// problems.txt} and out_dir/sft.jsonl, every file atomically. Refuses a dataset directory that
// already holds other ProbNNN problems (a reader would mix them in); rewriting the same tasks is
// fine.
Status WriteVerilogTasks(const std::vector<VerilogTask>& tasks, const std::string& out_dir);

}  // namespace gk::data
