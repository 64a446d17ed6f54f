// One spec-to-RTL task before it becomes files: the ports, the prose, the reference body and
// how to drive it. Rendering turns it into the three verilog-eval files (prompt, RefModule,
// self-checking testbench) with the layout of shared/spec/verilog-eval.md §1.2-§1.3.
// Internal to src/tools/data; the public API is verilog_synth.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gk::data {

struct Port {
  bool input = true;
  std::string name;
  int width = 1;
  bool is_reg = false;  // outputs: declared `output reg` (assigned in an always block)
  std::string stim;     // inputs: the value expression of the random phase; "" = uniform random
};

Port In(const std::string& name, int width = 1, const std::string& stim = "");
Port Out(const std::string& name, int width = 1, bool is_reg = false);

struct Design {
  std::string family;  // template family, e.g. "counter"
  std::string slug;    // unique over the catalogue: the <name> of ProbNNN_<name>
  std::vector<Port> ports;
  // Behaviour paragraphs, word-wrapped at 72 columns; a paragraph whose first line starts with
  // two spaces (a table) is kept verbatim.
  std::vector<std::string> spec;
  std::string body;   // the reference module's body, between the port list and endmodule
  std::string think;  // the SFT response's reasoning

  // Stimulus. Inputs change at falling clock edges, so at every compared edge the inputs are
  // stable and the sync/async reset difference is visible. A port named reset or areset is
  // held high for the first two rising edges; outputs are compared at every edge after the
  // first one.
  std::string stim_decls;   // extra declarations and tasks inside stimulus_gen
  std::string directed;     // statements run after the reset, before the random phase
  bool exhaustive = false;  // walk every input combination first (combinational, few input bits)
  int random_cycles = 200;  // falling edges of random stimulus
  std::string step;         // one random-phase step; "" = every input gets its stim value
  int reset_rate_log2 = 5;  // random phase: reset is asserted with probability 2^-rate
};

// Bits needed to hold 0..n-1 (at least 1).
int BitsFor(uint64_t n);
// "[7:0] " for width 8, "" for width 1.
std::string Range(int width);
// A uniformly random value expression of `width` bits ($random(seed) pieces).
std::string RandomExpr(int width);
// Random, but a quarter of the time all ones and an eighth of the time all zeros (so that
// wide reductions and comparisons see their rare cases).
std::string CornerExpr(int width);

// Random-phase statements that sometimes pulse areset between two clock edges: an asynchronous
// reset acts on it, a synchronous one never sees it, so the two visibly diverge.
std::string AsyncResetPulse();

std::string RenderPrompt(const Design& d);
std::string RenderRef(const Design& d);
std::string RenderTestbench(const Design& d, uint32_t stim_seed);

}  // namespace gk::data
