#include "tools/data/verilog_design.h"

#include <algorithm>
#include <sstream>

#include "util/result.h"

namespace gk::data {
namespace {

constexpr size_t kWrapColumns = 72;

bool IsReset(const Port& p) { return p.name == "reset" || p.name == "areset"; }
bool IsClock(const Port& p) { return p.name == "clk"; }

// Greedy word wrap; paragraphs never contain hard line breaks of their own.
std::string Wrap(const std::string& text) {
  std::istringstream words(text);
  std::string word, line, out;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > kWrapColumns) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += line + "\n";
  return out;
}

// verilog-eval's bullet list: " - input  in  (255 bits)" / " - output out (  8 bits)".
std::string PortList(const std::vector<Port>& ports) {
  size_t name_w = 0, digits_w = 0;
  for (const Port& p : ports) {
    if (p.width == 1) continue;
    name_w = std::max(name_w, p.name.size());
    digits_w = std::max(digits_w, std::to_string(p.width).size());
  }
  std::string out;
  for (const Port& p : ports) {
    out += p.input ? " - input  " : " - output ";
    if (p.width == 1) {
      out += p.name + "\n";
      continue;
    }
    const std::string digits = std::to_string(p.width);
    out += p.name + std::string(name_w - p.name.size(), ' ') + " (" + std::string(digits_w - digits.size(), ' ') +
           digits + " bits)\n";
  }
  return out;
}

std::string Declaration(const Port& p) {
  return StrCat(p.input ? "input " : (p.is_reg ? "output reg " : "output "), Range(p.width), p.name);
}

std::vector<const Port*> StimInputs(const Design& d) {
  std::vector<const Port*> v;
  for (const Port& p : d.ports) {
    if (p.input && !IsClock(p)) v.push_back(&p);
  }
  return v;
}

std::vector<const Port*> Outputs(const Design& d) {
  std::vector<const Port*> v;
  for (const Port& p : d.ports) {
    if (!p.input) v.push_back(&p);
  }
  return v;
}

const Port* ResetPort(const Design& d) {
  for (const Port& p : d.ports) {
    if (p.input && IsReset(p)) return &p;
  }
  return nullptr;
}

std::string Indent(const std::string& text, const std::string& pad) {
  std::istringstream lines(text);
  std::string line, out;
  while (std::getline(lines, line)) out += line.empty() ? "\n" : pad + line + "\n";
  return out;
}

std::string DefaultStep(const Design& d) {
  std::string s;
  for (const Port* p : StimInputs(d)) {
    std::string value = p->stim.empty() ? RandomExpr(p->width) : p->stim;
    if (IsReset(*p)) value = StrCat("(($random(seed) & ", (1 << d.reset_rate_log2) - 1, ") == 0)");
    s += StrCat("      ", p->name, " <= ", value, ";\n");
  }
  if (const Port* r = ResetPort(d); r && r->name == "areset") s += Indent(AsyncResetPulse(), "      ");
  return s;
}

std::string StimulusModule(const Design& d, uint32_t stim_seed) {
  const auto inputs = StimInputs(d);
  std::string s = "module stimulus_gen (\n  input clk";
  for (const Port* p : inputs) s += StrCat(",\n  output reg ", Range(p->width), p->name);
  s += "\n);\n\n";
  s += StrCat("  integer seed = ", stim_seed, ";\n  integer i;\n");
  if (!d.stim_decls.empty()) s += Indent(d.stim_decls, "  ");
  s += "\n  initial begin\n";
  for (const Port* p : inputs) s += StrCat("    ", p->name, " <= ", IsReset(*p) ? "1" : "0", ";\n");
  s += "    @(negedge clk);\n";
  if (const Port* r = ResetPort(d)) s += StrCat("    @(negedge clk) ", r->name, " <= 0;\n");
  if (!d.directed.empty()) s += Indent(d.directed, "    ");
  if (d.exhaustive && !inputs.empty()) {
    int bits = 0;
    std::string concat;
    for (const Port* p : inputs) {
      bits += p->width;
      concat += (concat.empty() ? "" : ", ") + p->name;
    }
    s += StrCat("    for (i = 0; i < ", uint64_t(1) << bits, "; i = i + 1)\n      @(negedge clk) {", concat,
                "} <= i;\n");
  }
  s += StrCat("    repeat (", d.random_cycles, ") @(negedge clk) begin\n");
  s += d.step.empty() ? DefaultStep(d) : Indent(d.step, "      ");
  s += "    end\n    @(negedge clk);\n    #1 $finish;\n  end\n\nendmodule\n";
  return s;
}

std::string Connections(const Design& d, const std::string& suffix) {
  std::string s;
  for (const Port& p : d.ports) {
    s += StrCat(s.empty() ? "" : ", ", ".", p.name, "(", p.name, p.input ? "" : suffix, ")");
  }
  return s;
}

std::string TestbenchModule(const Design& d) {
  const auto outputs = Outputs(d);
  std::string s = "module tb();\n\n  typedef struct packed {\n    int errors;\n    int errortime;\n";
  for (const Port* o : outputs) s += StrCat("    int errors_", o->name, ";\n    int errortime_", o->name, ";\n");
  s += "    int clocks;\n  } stats;\n\n  stats stats1;\n\n  reg clk = 0;\n  initial forever #5 clk = ~clk;\n\n";
  for (const Port* p : StimInputs(d)) s += StrCat("  logic ", Range(p->width), p->name, ";\n");
  std::string refs, duts;
  for (const Port* o : outputs) {
    s += StrCat("  logic ", Range(o->width), o->name, "_ref;\n  logic ", Range(o->width), o->name, "_dut;\n");
    refs += (refs.empty() ? "" : ", ") + o->name + "_ref";
    duts += (duts.empty() ? "" : ", ") + o->name + "_dut";
  }
  s += "\n  stimulus_gen stim1 (.clk(clk)";
  for (const Port* p : StimInputs(d)) s += StrCat(", .", p->name, "(", p->name, ")");
  s += ");\n";
  s += "  RefModule good1 (" + Connections(d, "_ref") + ");\n";
  s += "  TopModule top_module1 (" + Connections(d, "_dut") + ");\n\n";
  // ref ^ dut ^ ref is dut where the reference is known and X where it is X, and X === X:
  // an X in the reference matches anything, an X from the DUT matches only an X.
  s += "  // An X bit in the reference output matches anything; the DUT must match every known bit.\n";
  s += StrCat("  wire tb_match = ({", refs, "} === ({", refs, "} ^ {", duts, "} ^ {", refs, "}));\n\n");
  // The first rising edge (5 ps) comes before a synchronous reset has acted: the state is
  // unknown there, and a reference may still drive a known value from it, so it is not checked.
  s += "  always @(posedge clk, negedge clk) if ($time > 5) begin\n    stats1.clocks++;\n    if (!tb_match) begin\n"
       "      if (stats1.errors == 0) stats1.errortime = $time;\n      stats1.errors++;\n    end\n";
  for (const Port* o : outputs) {
    const std::string& n = o->name;
    s += StrCat("    if (", n, "_ref !== (", n, "_ref ^ ", n, "_dut ^ ", n, "_ref)) begin\n      if (stats1.errors_", n,
                " == 0) stats1.errortime_", n, " = $time;\n      stats1.errors_", n, "++;\n    end\n");
  }
  s += "  end\n\n  // Watchdog: the stimulus ends long before this.\n  initial begin\n    #1000000;\n"
       "    $display(\"TIMEOUT\");\n    $finish();\n  end\n\n  final begin\n";
  for (const Port* o : outputs) {
    const std::string& n = o->name;
    s += StrCat("    if (stats1.errors_", n, ") $display(\"Hint: Output '%s' has %0d mismatches. First mismatch ",
                "occurred at time %0d.\", \"", n, "\", stats1.errors_", n, ", stats1.errortime_", n, ");\n",
                "    else $display(\"Hint: Output '%s' has no mismatches.\", \"", n, "\");\n");
  }
  s += "    $display(\"Hint: Total mismatched samples is %1d out of %1d samples\\n\", stats1.errors, stats1.clocks);\n"
       "    $display(\"Simulation finished at %0d ps\", $time);\n"
       "    $display(\"Mismatches: %1d in %1d samples\", stats1.errors, stats1.clocks);\n  end\n\nendmodule\n";
  return s;
}

}  // namespace

Port In(const std::string& name, int width, const std::string& stim) {
  Port p;
  p.input = true;
  p.name = name;
  p.width = width;
  p.stim = stim;
  return p;
}

Port Out(const std::string& name, int width, bool is_reg) {
  Port p;
  p.input = false;
  p.name = name;
  p.width = width;
  p.is_reg = is_reg;
  return p;
}

int BitsFor(uint64_t n) {
  int bits = 1;
  while (bits < 64 && (uint64_t(1) << bits) < n) ++bits;
  return bits;
}

std::string Range(int width) { return width == 1 ? "" : StrCat("[", width - 1, ":0] "); }

std::string RandomExpr(int width) {
  if (width <= 32) return "$random(seed)";
  std::string s = "{";
  for (int i = 0; i < (width + 31) / 32; ++i) s += i ? ", $random(seed)" : "$random(seed)";
  return s + "}";
}

std::string CornerExpr(int width) {
  return StrCat("(($random(seed) & 3) == 0) ? {", width, "{1'b1}} : (($random(seed) & 7) == 0) ? ", width,
                "'d0 : ", RandomExpr(width));
}

std::string AsyncResetPulse() {
  return "if (($random(seed) & 31) == 0) begin\n  #2 areset <= 1;\n  #2 areset <= 0;\nend\n";
}

std::string RenderPrompt(const Design& d) {
  std::string s =
      "\nI would like you to implement a module named TopModule with the following\n"
      "interface. All input and output ports are one bit unless otherwise\nspecified.\n\n";
  s += PortList(d.ports);
  for (const std::string& para : d.spec) s += "\n" + (para.starts_with("  ") ? para + "\n" : Wrap(para));
  return s;
}

std::string RenderRef(const Design& d) {
  std::string s = "module RefModule (\n";
  for (size_t i = 0; i < d.ports.size(); ++i) {
    s += "  " + Declaration(d.ports[i]) + (i + 1 < d.ports.size() ? ",\n" : "\n");
  }
  return s + ");\n\n" + d.body + "\nendmodule\n";
}

std::string RenderTestbench(const Design& d, uint32_t stim_seed) {
  return "`timescale 1 ps/1 ps\n\n" + StimulusModule(d, stim_seed) + "\n" + TestbenchModule(d);
}

}  // namespace gk::data
