// Sequential template families: counters, shift registers, sequence detectors, table FSMs,
// edge detectors and registers. Every reference resets into a known state, or (without a
// reset) flushes its unknown start-up value within a few cycles; the testbench treats an X in
// the reference output as "anything goes".
#include <algorithm>
#include <set>

#include "tools/data/verilog_templates.h"
#include "util/result.h"

namespace gk::data {
namespace {

constexpr const char* kEnaStim = "($random(seed) & 3) != 0";

const char* ResetName(ResetKind r) { return r == ResetKind::kAsync ? "areset" : "reset"; }
const char* ResetSlug(ResetKind r) { return r == ResetKind::kAsync ? "_ar" : r == ResetKind::kSync ? "_sr" : ""; }

std::string AlwaysHead(ResetKind r) {
  return r == ResetKind::kAsync ? "  always @(posedge clk or posedge areset) begin\n"
                                : "  always @(posedge clk) begin\n";
}

// effect: "q is set to 0".
std::string ResetText(ResetKind r, const std::string& effect) {
  if (r == ResetKind::kSync)
    return StrCat("reset is an active high synchronous reset: at a rising clock edge where reset is 1, ", effect, ".");
  if (r == ResetKind::kAsync)
    return StrCat("areset is an active high asynchronous reset: as soon as areset is 1, ", effect,
                  ", without waiting for a clock edge.");
  return "There is no reset.";
}

std::string ResetThink(ResetKind r) {
  if (r == ResetKind::kAsync) return " Listing posedge areset in the sensitivity list makes the reset asynchronous.";
  if (r == ResetKind::kSync) return " The reset is tested inside the clocked block, so it is synchronous.";
  return "";
}

Design Seq(const std::string& family, const std::string& slug, ResetKind r) {
  Design d;
  d.family = family;
  d.slug = slug;
  d.ports.push_back(In("clk"));
  if (r != ResetKind::kNone) d.ports.push_back(In(ResetName(r)));
  d.random_cycles = 300;
  return d;
}

const ResetKind kSyncAsync[] = {ResetKind::kSync, ResetKind::kAsync};
const ResetKind kAllResets[] = {ResetKind::kNone, ResetKind::kSync, ResetKind::kAsync};

// ---- counter ----

enum class Dir { kUp, kDown, kUpDown };

std::string CounterNext(Dir dir, int w, int m, const std::string& pad) {
  const std::string up = StrCat("q <= (q == ", Lit(w, m - 1), ") ? ", Lit(w, 0), " : q + 1'b1;\n");
  const std::string down = StrCat("q <= (q == ", Lit(w, 0), ") ? ", Lit(w, m - 1), " : q - 1'b1;\n");
  if (dir == Dir::kUp) return pad + up;
  if (dir == Dir::kDown) return pad + down;
  return StrCat(pad, "if (up)\n", pad, "  ", up, pad, "else\n", pad, "  ", down);
}

Design ModCounter(Dir dir, int m, bool ena, ResetKind r) {
  const int w = BitsFor(uint64_t(m));
  const int rv = dir == Dir::kDown ? m - 1 : 0;
  const char* dname = dir == Dir::kUp ? "up" : dir == Dir::kDown ? "down" : "updown";
  Design d = Seq("counter", StrCat("counter_", dname, "_mod", m, ena ? "_ena" : "", ResetSlug(r)), r);
  if (ena) d.ports.push_back(In("ena", 1, kEnaStim));
  if (dir == Dir::kUpDown) d.ports.push_back(In("up"));
  d.ports.push_back(Out("q", w, true));
  std::string what =
      dir == Dir::kUp ? StrCat("a counter that counts from 0 up to ", m - 1,
                               " and then wraps around to 0, so it has a period of ", m)
      : dir == Dir::kDown
          ? StrCat("a counter that counts down from ", m - 1, " to 0 and then wraps around to ", m - 1,
                   ", so it has a period of ", m)
          : StrCat("an up/down counter over the values 0 to ", m - 1, ". When up is 1 it counts up, wrapping from ",
                   m - 1, " to 0; when up is 0 it counts down, wrapping from 0 to ", m - 1);
  std::string text = StrCat("The module should implement ", what, ". The count is the output q.");
  if (ena) text += " The counter moves only at rising clock edges where ena is 1; when ena is 0 it keeps its value.";
  d.spec = {text, StrCat(ResetText(r, StrCat("q is set to ", rv)), ena ? " The reset has priority over ena." : ""),
            kClockSentence};
  const std::string rn = ResetName(r);
  d.body = StrCat(AlwaysHead(r), "    if (", rn, ")\n      q <= ", Lit(w, rv), ";\n",
                  ena ? "    else if (ena) begin\n" : "    else begin\n", CounterNext(dir, w, m, "      "),
                  "    end\n  end\n");
  d.think =
      StrCat("The values 0 to ", m - 1, " need ", w, " bits. At each edge the counter either resets to ", rv, ", or",
             ena ? ", when ena is 1," : "",
             " takes one step, and the wrap-around is an explicit comparison with the last value before stepping.",
             ResetThink(r));
  d.directed = StrCat(ena ? "ena <= 1;\n" : "", dir == Dir::kUpDown ? "up <= 1;\n" : "", "repeat (", m + 3,
                      ") @(negedge clk);\n",
                      dir == Dir::kUpDown ? StrCat("up <= 0;\nrepeat (", m + 3, ") @(negedge clk);\n") : "");
  return d;
}

void ModCounters(std::vector<Design>& out) {
  std::vector<int> mods;
  for (int m = 2; m <= 16; ++m) mods.push_back(m);
  for (int m : {20, 24, 25, 32, 50, 60, 64, 100, 128, 200, 256}) mods.push_back(m);
  for (Dir dir : {Dir::kUp, Dir::kDown, Dir::kUpDown}) {
    for (int m : mods) {
      for (bool ena : {false, true}) {
        for (ResetKind r : kSyncAsync) {
          // verilog-eval's count15, count10 and countslow.
          if (dir == Dir::kUp && r == ResetKind::kSync && (m == 10 || (m == 16 && !ena))) continue;
          out.push_back(ModCounter(dir, m, ena, r));
        }
      }
    }
  }
}

void RangeCounters(std::vector<Design>& out) {
  std::mt19937_64 rng(0x4a46e5ULL);  // fixed: the catalogue must not depend on --seed
  std::set<std::pair<int, int>> pairs;
  while (pairs.size() < 30) {
    const int lo = int(Below(rng, 20)) + 1;
    const int hi = lo + 2 + int(Below(rng, 40));
    if (lo == 1 && hi == 10) continue;  // verilog-eval's count1to10
    pairs.insert({lo, hi});
  }
  for (const auto& [lo, hi] : pairs) {
    for (ResetKind r : kSyncAsync) {
      const int w = BitsFor(uint64_t(hi) + 1);
      Design d = Seq("counter", StrCat("counter_range", lo, "to", hi, ResetSlug(r)), r);
      d.ports.push_back(Out("q", w, true));
      d.spec = {StrCat("The module should implement a counter that counts ", lo, ", ", lo + 1, ", ..., ", hi,
                       " and then wraps back to ", lo, ", so it has a period of ", hi - lo + 1, ". The count is the ",
                       w, "-bit output q."),
                ResetText(r, StrCat("q is set to ", lo)), kClockSentence};
      const std::string rn = ResetName(r);
      d.body = StrCat(AlwaysHead(r), "    if (", rn, ")\n      q <= ", Lit(w, lo),
                      ";\n    else\n      q <= (q == ", Lit(w, hi), ") ? ", Lit(w, lo), " : q + 1'b1;\n  end\n");
      d.think = StrCat("The largest value ", hi, " needs ", w, " bits. Reset loads ", lo,
                       ", and each edge either increments or, at ", hi, ", reloads ", lo, ".", ResetThink(r));
      d.directed = StrCat("repeat (", 2 * (hi - lo + 1) + 2, ") @(negedge clk);\n");
      out.push_back(d);
    }
  }
}

void SaturatingCounters(std::vector<Design>& out) {
  for (int w : {3, 4, 5, 6, 8}) {  // 2 bits is verilog-eval's counter_2bc
    for (ResetKind r : kSyncAsync) {
      const uint64_t top = (uint64_t(1) << w) - 1;
      Design d = Seq("counter", StrCat("counter_sat_w", w, ResetSlug(r)), r);
      d.ports.push_back(In("ena", 1, kEnaStim));
      d.ports.push_back(In("up"));
      d.ports.push_back(Out("q", w, true));
      d.spec = {
          StrCat("The module should implement ", A(w), " ", w,
                 "-bit saturating up/down counter with output q. At a rising clock edge where ena is 1, q counts up by "
                 "one when up is 1 and down by one when up is 0, but it never wraps around: counting up at ",
                 top, " keeps ", top, ", and counting down at 0 keeps 0. When ena is 0, q keeps its value."),
          StrCat(ResetText(r, "q is set to 0"), " The reset has priority over ena."), kClockSentence};
      const std::string rn = ResetName(r);
      d.body = StrCat(AlwaysHead(r), "    if (", rn, ")\n      q <= ", Lit(w, 0), ";\n    else if (ena) begin\n",
                      "      if (up && q != ", Lit(w, top), ")\n        q <= q + 1'b1;\n",
                      "      else if (!up && q != ", Lit(w, 0), ")\n        q <= q - 1'b1;\n    end\n  end\n");
      d.think = StrCat("Saturation means a step is taken only when it stays in range: up only below ", top,
                       ", down only above 0; otherwise q keeps its value.", ResetThink(r));
      d.directed = StrCat("ena <= 1;\nup <= 1;\nrepeat (", top + 4, ") @(negedge clk);\nup <= 0;\nrepeat (", top + 4,
                          ") @(negedge clk);\n");
      out.push_back(d);
    }
  }
}

// ---- shiftreg ----

void SerialInShiftRegisters(std::vector<Design>& out) {
  for (int l : {2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32}) {
    for (bool left : {true, false}) {
      for (bool ena : {false, true}) {
        for (ResetKind r : kAllResets) {
          Design d =
              Seq("shiftreg", StrCat("shiftreg", l, left ? "_left" : "_right", ena ? "_ena" : "", ResetSlug(r)), r);
          if (ena) d.ports.push_back(In("ena", 1, kEnaStim));
          d.ports.push_back(In("in"));
          d.ports.push_back(Out("q", l, true));
          const std::string moves = left ? StrCat(
                                               "one position toward the most significant bit: q[0] takes the value of "
                                               "in, every other bit q[i] takes the old value of q[i-1], and the old q[",
                                               l - 1, "] is lost")
                                         : StrCat("one position toward the least significant bit: q[", l - 1,
                                                  "] takes the value of in, every other bit q[i] takes the old value "
                                                  "of q[i+1], and the old q[0] is lost");
          std::string text =
              StrCat("The module should implement ", A(l), " ", l,
                     "-bit shift register with serial input in and parallel output q. At each rising clock edge",
                     ena ? " where ena is 1" : "", " the contents move ", moves, ".");
          if (ena) text += " When ena is 0, q keeps its value.";
          d.spec = {text,
                    r == ResetKind::kNone
                        ? ResetText(r, "")
                        : StrCat(ResetText(r, "q is cleared to 0"), ena ? " The reset has priority over ena." : ""),
                    kClockSentence};
          const std::string shift =
              left ? StrCat("q <= {q[", l - 2, ":0], in};\n") : StrCat("q <= {in, q[", l - 1, ":1]};\n");
          std::string body = AlwaysHead(r);
          if (r != ResetKind::kNone)
            body += StrCat("    if (", ResetName(r), ")\n      q <= ", Lit(l, 0), ";\n    else ");
          else
            body += "    ";
          body += ena ? StrCat("if (ena)\n      ", shift) : shift;
          d.body = body + "  end\n";
          d.think = StrCat("A shift is a concatenation: ",
                           left ? StrCat("{q[", l - 2, ":0], in} drops the top bit and appends in at the bottom")
                                : StrCat("{in, q[", l - 1, ":1]} drops the bottom bit and puts in at the top"),
                           ". Assigning it with a nonblocking assignment at each clock edge",
                           ena ? " guarded by ena" : "", " gives the shift register.", ResetThink(r));
          out.push_back(d);
        }
      }
    }
  }
}

void DelayLines(std::vector<Design>& out) {
  for (int l : {2, 3, 4, 5, 6, 8, 12, 16}) {
    for (ResetKind r : {ResetKind::kNone, ResetKind::kSync}) {
      Design d = Seq("shiftreg", StrCat("delay", l, ResetSlug(r)), r);
      d.ports.push_back(In("in"));
      d.ports.push_back(Out("out"));
      d.spec = {StrCat("The module should delay the input in by ", l, " clock cycles. It is a chain of ", l,
                       " flip-flops clocked by clk: at each rising edge the first one samples in and every other one "
                       "samples the one before it. out is the output of the last flip-flop."),
                ResetText(r, StrCat("all ", l, " flip-flops are cleared to 0")), kClockSentence};
      d.body = StrCat("  reg [", l - 1, ":0] sr;\n\n", AlwaysHead(r),
                      r == ResetKind::kNone ? "" : StrCat("    if (reset)\n      sr <= ", Lit(l, 0), ";\n    else\n  "),
                      "    sr <= {sr[", l - 2, ":0], in};\n  end\n\n  assign out = sr[", l - 1, "];\n");
      d.think = StrCat("The ", l, " flip-flops are one ", l,
                       "-bit register shifted toward its top bit each cycle, with in entering at bit 0; out is the top "
                       "bit, which holds in from ",
                       l, " edges earlier.", ResetThink(r));
      out.push_back(d);
    }
  }
}

void SerialShiftRegisters(std::vector<Design>& out) {
  SerialInShiftRegisters(out);
  DelayLines(out);
}

void LoadShiftRegisters(std::vector<Design>& out) {
  struct Mode {
    const char* name;
    const char* text;
  };
  const Mode kModes[] = {
      {"shl", "shifts left by one position (toward the most significant bit), and q[0] becomes 0"},
      {"shr", "shifts right by one position (toward the least significant bit), and the top bit becomes 0"},
      {"sra", "shifts right by one position as an arithmetic shift: the top bit keeps its value"},
      {"rol", "rotates left by one position: the old top bit moves to q[0]"},
      {"ror", "rotates right by one position: the old q[0] moves to the top bit"},
  };
  for (int l : {5, 6, 8, 12, 16, 24, 32}) {  // 4 bits with areset is verilog-eval's shift4
    for (const Mode& mode : kModes) {
      for (ResetKind r : {ResetKind::kNone, ResetKind::kAsync}) {
        const std::string m = mode.name, hi = std::to_string(l - 1), hi2 = std::to_string(l - 2);
        Design d = Seq("shiftreg", StrCat("loadshift", l, "_", m, ResetSlug(r)), r);
        d.ports.push_back(In("load", 1, "($random(seed) & 7) == 0"));
        d.ports.push_back(In("ena"));
        d.ports.push_back(In("data", l));
        d.ports.push_back(Out("q", l, true));
        d.spec = {StrCat("The module should implement ", A(l), " ", l,
                         "-bit shift register q with synchronous parallel load. At each rising clock edge: if load is "
                         "1, q takes the value of data; otherwise, if ena is 1, q ",
                         mode.text, "; otherwise q keeps its value. load has priority over ena."),
                  r == ResetKind::kNone
                      ? ResetText(r, "")
                      : StrCat(ResetText(r, "q is cleared to 0"), " The reset has priority over load and ena."),
                  kClockSentence};
        const std::string next = m == "shl"   ? StrCat("{q[", hi2, ":0], 1'b0}")
                                 : m == "shr" ? StrCat("{1'b0, q[", hi, ":1]}")
                                 : m == "sra" ? StrCat("{q[", hi, "], q[", hi, ":1]}")
                                 : m == "rol" ? StrCat("{q[", hi2, ":0], q[", hi, "]}")
                                              : StrCat("{q[0], q[", hi, ":1]}");
        std::string body = AlwaysHead(r);
        body += r == ResetKind::kNone ? "    if (load)\n"
                                      : StrCat("    if (areset)\n      q <= ", Lit(l, 0), ";\n    else if (load)\n");
        body += StrCat("      q <= data;\n    else if (ena)\n      q <= ", next, ";\n  end\n");
        d.body = body;
        d.think = StrCat("An if / else if chain gives load priority over ena. The one-position ", m,
                         " is the concatenation ", next, ".", ResetThink(r));
        out.push_back(d);
      }
    }
  }
}

// ---- seqdet: sequence detectors built from the pattern's prefix automaton ----

// The longest prefix of p (at most max_len long) that is a suffix of t.
int LongestPrefixSuffix(const std::string& p, const std::string& t, size_t max_len) {
  for (size_t k = std::min(max_len, t.size()); k > 0; --k) {
    if (t.compare(t.size() - k, k, p, 0, k) == 0) return int(k);
  }
  return 0;
}

// Length of the longest proper prefix of p that is also a suffix: how far occurrences overlap.
int Border(const std::string& p) { return LongestPrefixSuffix(p, p.substr(1), p.size() - 1); }

struct Detector {
  int states = 0;
  std::vector<int> next[2];  // next[x][s]
};

Detector BuildDetector(const std::string& p, bool moore, bool overlap) {
  const size_t l = p.size();
  Detector det;
  det.states = moore ? int(l) + 1 : int(l);
  for (int x = 0; x < 2; ++x) {
    const char c = char('0' + x);
    for (int s = 0; s < det.states; ++s) {
      int n;
      if (moore) {
        // From the "detected" state a non-overlapping search starts again from nothing.
        const int from = (s == int(l) && !overlap) ? 0 : s;
        n = LongestPrefixSuffix(p, p.substr(0, from) + c, l);
      } else if (s == int(l) - 1 && c == p.back() && !overlap) {
        n = 0;
      } else {
        n = LongestPrefixSuffix(p, p.substr(0, s) + c, l - 1);
      }
      det.next[x].push_back(n);
    }
  }
  return det;
}

std::string SeqDetBody(const std::string& p, bool moore, const Detector& det, ResetKind r) {
  const int sw = BitsFor(uint64_t(det.states));
  std::vector<std::string> params;
  for (int s = 0; s < det.states; ++s) params.push_back(StrCat("S", s, " = ", Lit(sw, s)));
  std::string body = StrCat("  localparam [", sw - 1, ":0] ", Join(params, ", "), ";\n  reg [", sw - 1,
                            ":0] state, next;\n\n  always @(*) begin\n    case (state)\n");
  for (int s = 0; s < det.states; ++s) {
    const int n0 = det.next[0][s], n1 = det.next[1][s];
    body += n0 == n1 ? StrCat("      S", s, ": next = S", n0, ";\n")
                     : StrCat("      S", s, ": next = x ? S", n1, " : S", n0, ";\n");
  }
  if ((1 << sw) > det.states) body += "      default: next = S0;\n";
  body += StrCat("    endcase\n  end\n\n", AlwaysHead(r), "    if (", ResetName(r), ")\n      state <= S0;\n    else\n",
                 "      state <= next;\n  end\n\n");
  const int last = int(p.size());
  body += moore ? StrCat("  assign z = (state == S", last, ");\n")
                : StrCat("  assign z = (state == S", last - 1, ") && ", p.back() == '1' ? "x" : "!x", ";\n");
  return body;
}

std::string SeqDetThink(const std::string& p, bool moore, bool overlap, const Detector& det, ResetKind r) {
  const int l = int(p.size());
  std::string t = StrCat("State Sk means that the last k bits received match the first k bits of ", p, ". ");
  t += moore ? StrCat("As a Moore machine it needs S0 to S", l, ", and z = 1 exactly in S", l, ". ")
             : StrCat("As a Mealy machine it needs only S0 to S", l - 1, ": z = 1 when the machine is in S", l - 1,
                      " and x is ", p.back(), ". ");
  t += overlap ? "After a mismatch, or after a detection, the next state is the longest prefix of the pattern that "
                 "ends the bits seen so far, so overlapping occurrences are found. "
               : "After a detection the search restarts from S0, so occurrences cannot overlap; after a mismatch the "
                 "next state is the longest prefix of the pattern that ends the bits seen so far. ";
  std::vector<std::string> rows;
  for (int s = 0; s < det.states; ++s) rows.push_back(StrCat("S", s, " -> S", det.next[0][s], "/S", det.next[1][s]));
  t += StrCat("Transitions for x = 0/1: ", Join(rows, ", "), ".");
  return t + ResetThink(r);
}

std::vector<std::string> SeqDetSpec(const std::string& p, bool moore, bool overlap, ResetKind r) {
  return {StrCat("The module should implement a finite state machine that detects the bit sequence ", p,
                 " on the serial input x, which carries one bit per clock cycle; the leftmost bit of the sequence "
                 "arrives first."),
          moore
              ? "It is a Moore machine: z should be 1 during the clock cycle that follows the rising clock edge at "
                "which the last bit of an occurrence is sampled, and 0 otherwise. z depends only on the current state."
              : "It is a Mealy machine: z should be 1 during a clock cycle in which the current state and the current "
                "value of x complete an occurrence of the sequence (x carries its last bit), and 0 otherwise.",
          overlap ? "Occurrences may overlap: the last bits of one occurrence can also be the first bits of the next."
                  : "Occurrences do not overlap: after the sequence has been detected, the search starts again from "
                    "scratch, and no bit of a detected occurrence counts toward the next one.",
          ResetText(r, "the machine returns to its initial state, in which no bit of the sequence has been seen"),
          kClockSentence};
}

void SeqDetStimulus(Design& d, const std::string& p, bool moore, ResetKind r) {
  const int l = int(p.size());
  const std::string rn = ResetName(r);
  // Besides random bits: the sequence, the sequence overlapped with its next occurrence,
  // and near misses (one bit flipped), which tell apart overlap rules and similar patterns.
  const std::string ovl = p + p.substr(size_t(Border(p)));
  d.stim_decls = StrCat("localparam [", l - 1, ":0] PAT = ", l, "'b", p, ";\nlocalparam [", ovl.size() - 1,
                        ":0] OVL = ", ovl.size(), "'b", ovl, ";\ninteger k, r;\n\n",
                        "// Sends the n low bits of bits on x, the highest first.\n",
                        "task send_bits(input [15:0] bits, input integer n);\n",
                        "  for (k = n - 1; k >= 0; k = k - 1)\n    @(negedge clk) x <= bits[k];\nendtask\n");
  d.directed = StrCat("repeat (3) send_bits(PAT, ", l, ");\nsend_bits(OVL, ", ovl.size(), ");\n");
  // A reset that lands while z is 1 (with the last bit for Mealy, one cycle later for Moore)
  // is what tells an asynchronous reset from a synchronous one.
  const std::string reset_on_hit = moore ? StrCat("@(negedge clk) ", rn, " <= 1;") : StrCat(rn, " <= 1;");
  d.step = StrCat("r = $random(seed) & 15;\nif (($random(seed) & 63) == 0) begin\n  ", rn, " <= 1;\nend else begin\n  ",
                  rn, " <= 0;\n  if (r == 0) begin\n    send_bits(PAT, ", l, ");\n    ", reset_on_hit,
                  "\n  end\n  else if (r < 3) send_bits(OVL, ", ovl.size(),
                  ");\n  else if (r < 5) send_bits(PAT ^ (1 << ($unsigned($random(seed)) % ", l, ")), ", l,
                  ");\n  else if (r < 7) send_bits(PAT, ", l, ");\n  else x <= $random(seed);\nend\n",
                  r == ResetKind::kAsync ? AsyncResetPulse() : "");
}

Design SeqDetector(const std::string& p, bool moore, bool overlap, ResetKind r) {
  Design d =
      Seq("seqdet", StrCat("seqdet_", p, moore ? "_moore" : "_mealy", overlap ? "_ovl" : "_novl", ResetSlug(r)), r);
  d.ports.push_back(In("x"));
  d.ports.push_back(Out("z"));
  const Detector det = BuildDetector(p, moore, overlap);
  d.spec = SeqDetSpec(p, moore, overlap, r);
  d.body = SeqDetBody(p, moore, det, r);
  d.think = SeqDetThink(p, moore, overlap, det, r);
  SeqDetStimulus(d, p, moore, r);
  return d;
}

void SequenceDetectors(std::vector<Design>& out) {
  for (int l = 3; l <= 6; ++l) {
    for (int v = 0; v < (1 << l); ++v) {
      std::string p;
      for (int b = l - 1; b >= 0; --b) p += char('0' + ((v >> b) & 1));
      for (bool moore : {true, false}) {
        for (bool overlap : {true, false}) {
          // Without a border occurrences cannot overlap: the two variants would be one function.
          if (!overlap && Border(p) == 0) continue;
          for (ResetKind r : kSyncAsync) out.push_back(SeqDetector(p, moore, overlap, r));
        }
      }
    }
  }
}

// ---- fsm: random state tables ----

struct Table {
  int k = 0;
  bool mealy = false;
  std::vector<int> next[2];
  std::vector<int> out[2];  // Moore: out[0] == out[1]
};

bool AllReachable(const Table& t) {
  std::vector<bool> seen(size_t(t.k), false);
  std::vector<int> frontier = {0};
  seen[0] = true;
  while (!frontier.empty()) {
    const int s = frontier.back();
    frontier.pop_back();
    for (int x = 0; x < 2; ++x) {
      const int n = t.next[x][size_t(s)];
      if (!seen[size_t(n)]) {
        seen[size_t(n)] = true;
        frontier.push_back(n);
      }
    }
  }
  for (bool b : seen)
    if (!b) return false;
  return true;
}

// Same output sequence for every input sequence from reset: a walk over pairs of states.
bool SameBehaviour(const Table& a, const Table& b) {
  std::vector<bool> seen(size_t(a.k * b.k), false);
  std::vector<std::pair<int, int>> frontier = {{0, 0}};
  seen[0] = true;
  while (!frontier.empty()) {
    const auto [s, t] = frontier.back();
    frontier.pop_back();
    for (int x = 0; x < 2; ++x) {
      if (a.out[x][size_t(s)] != b.out[x][size_t(t)]) return false;
      const int ns = a.next[x][size_t(s)], nt = b.next[x][size_t(t)];
      if (!seen[size_t(ns * b.k + nt)]) {
        seen[size_t(ns * b.k + nt)] = true;
        frontier.push_back({ns, nt});
      }
    }
  }
  return true;
}

Table RandomTable(std::mt19937_64& rng, int k, bool mealy) {
  while (true) {
    Table t;
    t.k = k;
    t.mealy = mealy;
    int ones = 0;
    for (int x = 0; x < 2; ++x) {
      for (int s = 0; s < k; ++s) t.next[x].push_back(int(Below(rng, uint64_t(k))));
    }
    for (int s = 0; s < k; ++s) {
      const int o0 = int(Below(rng, 2));
      const int o1 = mealy ? int(Below(rng, 2)) : o0;
      t.out[0].push_back(o0);
      t.out[1].push_back(o1);
      ones += o0 + o1;
    }
    // A Mealy output that is the same function of in in every state would make the state (and
    // the reset's timing) unobservable.
    bool state_dependent = !mealy;
    for (int st = 1; st < k; ++st) {
      if (t.out[0][size_t(st)] != t.out[0][0] || t.out[1][size_t(st)] != t.out[1][0]) state_dependent = true;
    }
    if (ones > 0 && ones < 2 * k && state_dependent && AllReachable(t)) return t;
  }
}

std::string StateName(int s) { return std::string(1, char('A' + s)); }

std::string OutputExpr(int o0, int o1) {
  if (o0 == o1) return o0 ? "1'b1" : "1'b0";
  return o1 ? "in" : "~in";
}

std::string NextExpr(const Table& t, int s) {
  const int n0 = t.next[0][size_t(s)], n1 = t.next[1][size_t(s)];
  return n0 == n1 ? StateName(n0) : StrCat("in ? ", StateName(n1), " : ", StateName(n0));
}

std::string TableText(const Table& t) {
  std::string s = t.mealy ? "  State | in=0       | in=1\n  ------+------------+-----------"
                          : "  State | Next (in=0) | Next (in=1) | out\n  ------+-------------+-------------+----";
  for (int st = 0; st < t.k; ++st) {
    const std::string n0 = StateName(t.next[0][size_t(st)]), n1 = StateName(t.next[1][size_t(st)]);
    if (t.mealy) {
      s += StrCat("\n  ", StateName(st), "     | ", n0, ", out = ", t.out[0][size_t(st)], " | ", n1,
                  ", out = ", t.out[1][size_t(st)]);
    } else {
      s += StrCat("\n  ", StateName(st), "     | ", n0, "           | ", n1, "           | ", t.out[0][size_t(st)]);
    }
  }
  return s;
}

std::string TableBody(const Table& t, ResetKind r) {
  const int sw = BitsFor(uint64_t(t.k));
  std::vector<std::string> params;
  for (int s = 0; s < t.k; ++s) params.push_back(StrCat(StateName(s), " = ", Lit(sw, s)));
  std::string body = StrCat("  localparam [", sw - 1, ":0] ", Join(params, ", "), ";\n  reg [", sw - 1,
                            ":0] state, next;\n\n  always @(*) begin\n    case (state)\n");
  for (int s = 0; s < t.k; ++s) {
    body += t.mealy ? StrCat("      ", StateName(s), ": begin next = ", NextExpr(t, s),
                             "; out = ", OutputExpr(t.out[0][size_t(s)], t.out[1][size_t(s)]), "; end\n")
                    : StrCat("      ", StateName(s), ": next = ", NextExpr(t, s), ";\n");
  }
  body += t.mealy ? "      default: begin next = A; out = 1'b0; end\n" : "      default: next = A;\n";
  body += StrCat("    endcase\n  end\n\n", AlwaysHead(r), "    if (", ResetName(r), ")\n      state <= A;\n    else\n",
                 "      state <= next;\n  end\n");
  if (!t.mealy) {
    std::vector<std::string> high;
    for (int s = 0; s < t.k; ++s)
      if (t.out[0][size_t(s)]) high.push_back(StrCat("(state == ", StateName(s), ")"));
    body += StrCat("\n  assign out = ", Join(high, " || "), ";\n");
  }
  return body;
}

void TableMachines(std::vector<Design>& out) {
  std::mt19937_64 rng(0xf5a7ab1eULL);  // fixed: the catalogue must not depend on --seed
  // Tables kept so far, starting with verilog-eval's fsm3 / fsm3s (never emitted): a new table
  // must behave differently from all of them, not just be written differently.
  Table fsm3;
  fsm3.k = 4;
  fsm3.next[0] = {0, 2, 0, 2};
  fsm3.next[1] = {1, 1, 3, 1};
  fsm3.out[0] = fsm3.out[1] = {0, 0, 0, 1};
  std::vector<Table> kept = {fsm3};
  for (int k = 3; k <= 6; ++k) {
    for (bool mealy : {false, true}) {
      for (int i = 0; i < (mealy ? 20 : 30);) {
        const Table t = RandomTable(rng, k, mealy);
        if (std::any_of(kept.begin(), kept.end(), [&](const Table& o) { return SameBehaviour(t, o); })) continue;
        kept.push_back(t);
        ++i;
        for (ResetKind r : kSyncAsync) {
          Design d = Seq("fsm", StrCat("fsm", k, mealy ? "_mealy_" : "_moore_", i, ResetSlug(r)), r);
          d.ports.push_back(In("in"));
          d.ports.push_back(Out("out", 1, mealy));
          const std::string names = StrCat(StateName(0), " to ", StateName(k - 1));
          d.spec = {StrCat("The module should implement a ", mealy ? "Mealy" : "Moore", " state machine with ", k,
                           " states, ", names,
                           ", one input in and one output out. At each rising clock edge it moves to the next state "
                           "that the table below gives for the current state and the value of in. ",
                           mealy ? "out is combinational and depends on both the current state and the current value "
                                   "of in, as given in the table (next state, out)."
                                 : "out depends only on the current state."),
                    TableText(t), ResetText(r, "the machine goes to state A"), kClockSentence};
          d.body = TableBody(t, r);
          // Frequent resets: a table may sink into a state it never leaves, and only the input
          // right after a reset then tells it apart from a similar table.
          d.random_cycles = 800;
          d.reset_rate_log2 = 3;
          d.think = StrCat(
              "The states get binary codes in localparams and a register holds the current one. A combinational case "
              "statement computes the next state",
              mealy ? " and out together, since a Mealy output depends on in"
                    : "; the Moore output is decoded from the state alone",
              ". The clocked block loads the next state.", ResetThink(r));
          out.push_back(d);
        }
      }
    }
  }
}

// ---- edge: edge detectors ----

struct Kind {
  const char* name;
  const char* change;  // what in[i] did
  const char* reg_expr;
  const char* comb_text;
};
const Kind kKinds[] = {
    {"rise", "changed from 0 to 1", "in & ~prev", "in[i] is 1 and prev[i] is 0"},
    {"fall", "changed from 1 to 0", "~in & prev", "in[i] is 0 and prev[i] is 1"},
    {"any", "changed in either direction", "in ^ prev", "in[i] differs from prev[i]"},
};

Design EdgeDetector(int w, const Kind& k, bool registered) {
  // Each bit toggles with probability 1/4 per cycle.
  const std::string toggle = StrCat("in ^ (", RandomExpr(w), " & ", RandomExpr(w), ")");
  const std::string bit = w == 1 ? "in" : "in[i]", obit = w == 1 ? "out" : "out[i]";
  const std::string kn = k.name;
  Design d = Seq("edge", StrCat("edge_", kn, registered ? "_reg" : "_comb", "_w", w), ResetKind::kNone);
  d.ports.push_back(In("in", w, toggle));
  d.ports.push_back(Out("out", w, registered));
  std::string reg_expr = k.reg_expr;
  std::string comb_text = k.comb_text;
  if (w == 1) {
    comb_text = kn == "rise"   ? "in is 1 and prev is 0"
                : kn == "fall" ? "in is 0 and prev is 1"
                               : "in differs from prev";
  }
  d.spec = {
      registered
          ? StrCat("The module should detect edges on ",
                   w == 1 ? "the input in" : StrCat("each bit of the ", w, "-bit input in"),
                   ". At each rising clock edge it compares in with the value in had at the previous rising edge: ",
                   obit, " is set to 1 if ", bit, " ", k.change,
                   " between those two edges, and to 0 otherwise. out changes only at rising clock edges.")
          : StrCat("The module should detect edges on ",
                   w == 1 ? "the input in" : StrCat("each bit of the ", w, "-bit input in"),
                   ". It keeps a copy prev of in, sampled at every rising clock edge. out is combinational: ", obit,
                   " is 1 whenever ", comb_text, ", and 0 otherwise."),
      "There is no reset.", kClockSentence};
  d.body = registered
               ? StrCat("  reg ", Range(w),
                        "prev;\n\n  always @(posedge clk) begin\n    prev <= in;\n    out <= ", reg_expr, ";\n  end\n")
               : StrCat("  reg ", Range(w),
                        "prev;\n\n  always @(posedge clk)\n    prev <= in;\n\n  assign out = ", reg_expr, ";\n");
  d.think = StrCat("A register prev holds in from the previous rising edge. Bitwise, ", reg_expr,
                   " is 1 exactly where the edge happened",
                   registered ? "; computing it inside the clocked block with nonblocking assignments compares the new "
                                "sample with the old one and registers the result."
                              : "; as a continuous assignment the result follows in immediately.");
  return d;
}

Design EdgeCapture(int w, bool rise) {
  // Each bit toggles with probability 1/4 per cycle.
  const std::string toggle = StrCat("in ^ (", RandomExpr(w), " & ", RandomExpr(w), ")");
  const std::string bit = w == 1 ? "in" : "in[i]", obit = w == 1 ? "out" : "out[i]";
  Design d = Seq("edge", StrCat("edgecapture_", rise ? "rise" : "fall", "_w", w), ResetKind::kSync);
  d.ports.push_back(In("in", w, toggle));
  d.ports.push_back(Out("out", w, true));
  d.spec = {StrCat("The module should capture ", rise ? "rising" : "falling", " edges on ",
                   w == 1 ? "the input in" : StrCat("each bit of the ", w, "-bit input in"),
                   ". At a rising clock edge where ", bit, " is ", rise ? "1" : "0", " and was ", rise ? "0" : "1",
                   " at the previous rising edge, ", obit, " becomes 1, and it then stays 1 until reset."),
            ResetText(ResetKind::kSync, "out is cleared to 0") + " The reset has priority over capturing.",
            kClockSentence};
  const std::string edge = rise ? "in & ~prev" : "prev & ~in";
  d.body = StrCat("  reg ", Range(w),
                  "prev;\n\n  always @(posedge clk) begin\n    prev <= in;\n    if (reset)\n      out <= ", Lit(w, 0),
                  ";\n    else\n      out <= out | (", edge, ");\n  end\n");
  d.think = StrCat("prev holds in from the previous edge, so ", edge, " marks the new ", rise ? "rising" : "falling",
                   " edges; OR-ing them into out makes each bit sticky until the synchronous reset clears it.");
  return d;
}

void EdgeDetectors(std::vector<Design>& out) {
  for (int w : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
    for (const Kind& k : kKinds) {
      for (bool registered : {true, false}) {
        // verilog-eval's edgedetect and edgedetect2.
        if (registered && w == 8 && std::string(k.name) != "fall") continue;
        out.push_back(EdgeDetector(w, k, registered));
      }
    }
    if (w == 3 || w == 6 || w == 12) continue;
    for (bool rise : {true, false}) {
      if (!rise && w == 32) continue;  // verilog-eval's edgecapture
      out.push_back(EdgeCapture(w, rise));
    }
  }
}

// ---- register: flip-flop banks, byte enables, accumulators ----

void FlipFlopBanks(std::vector<Design>& out) {
  std::mt19937_64 rng(0x2e915735ULL);           // fixed: the catalogue must not depend on --seed
  for (int w : {1, 2, 4, 6, 12, 16, 24, 32}) {  // 8 bits: verilog-eval's dff8, dff8r, dff8ar, dff8p
    for (ResetKind r : kAllResets) {
      for (bool ena : {false, true}) {
        for (bool zero : {true, false}) {
          if (r == ResetKind::kNone && !zero) continue;
          if (w == 1 && r == ResetKind::kNone && !ena) continue;  // verilog-eval's dff
          const uint64_t rv = zero ? 0 : Below(rng, (uint64_t(1) << w) - 1) + 1;
          Design d =
              Seq("register", StrCat("dff_w", w, ena ? "_ena" : "", ResetSlug(r), zero ? "" : "_rst" + Hex(rv)), r);
          if (ena) d.ports.push_back(In("ena", 1, kEnaStim));
          d.ports.push_back(In("d", w));
          d.ports.push_back(Out("q", w, true));
          std::string text =
              StrCat("The module should implement ", w == 1 ? "a D flip-flop" : StrCat(A(w), " ", w, "-bit register"),
                     ": at each rising clock edge", ena ? " where ena is 1" : "", ", q takes the value of d.");
          if (ena) text += " When ena is 0, q keeps its value.";
          d.spec = {
              text,
              r == ResetKind::kNone
                  ? ResetText(r, "")
                  : StrCat(ResetText(r, StrCat("q is set to ", rv, w > 1 ? StrCat(" (", w, "'h", Hex(rv), ")") : "")),
                           ena ? " The reset has priority over ena." : ""),
              kClockSentence};
          std::string body = AlwaysHead(r);
          if (r != ResetKind::kNone)
            body += StrCat("    if (", ResetName(r), ")\n      q <= ", Lit(w, rv), ";\n    else ");
          else
            body += "    ";
          body += ena ? "if (ena)\n      q <= d;\n" : "q <= d;\n";
          d.body = body + "  end\n";
          d.think = StrCat("A nonblocking assignment q <= d in a block triggered by posedge clk makes the flip-flops",
                           ena ? "; the if (ena) leaves q unchanged otherwise, which is a clock enable" : "",
                           r == ResetKind::kNone ? "." : StrCat(", and the reset branch loads ", rv, " first."),
                           ResetThink(r));
          out.push_back(d);
        }
      }
    }
  }
}

void ByteEnableRegisters(std::vector<Design>& out) {
  for (int w : {24, 32, 48, 64}) {  // 16 bits: verilog-eval's dff16e
    const int nb = w / 8;
    Design d = Seq("register", StrCat("byteena_w", w), ResetKind::kSync);
    d.ports.push_back(In("be", nb));
    d.ports.push_back(In("d", w));
    d.ports.push_back(Out("q", w, true));
    d.spec = {StrCat("The module should implement ", A(w), " ", w,
                     "-bit register with byte enables. be[k] enables byte k, q[8k+7:8k]: at each rising clock edge "
                     "every enabled byte of q takes the matching byte of d, and the other bytes keep their values."),
              ResetText(ResetKind::kSync, "q is cleared to 0") + " The reset has priority over be.", kClockSentence};
    d.body = StrCat("  integer k;\n\n  always @(posedge clk) begin\n    if (reset)\n      q <= ", Lit(w, 0),
                    ";\n    else\n      for (k = 0; k < ", nb,
                    "; k = k + 1)\n        if (be[k]) q[k*8 +: 8] <= d[k*8 +: 8];\n  end\n");
    d.think =
        "A loop over the bytes with an indexed part-select q[k*8 +: 8] updates only the enabled bytes; bytes that are "
        "not assigned keep their value because q is a register.";
    out.push_back(d);
  }
}

void Accumulators(std::vector<Design>& out) {
  for (int wi : {4, 8}) {
    for (int wa : {8, 12, 16}) {
      for (ResetKind r : kSyncAsync) {
        Design d = Seq("register", StrCat("accum_in", wi, "_acc", wa, ResetSlug(r)), r);
        d.ports.push_back(In("ena", 1, kEnaStim));
        d.ports.push_back(In("in", wi));
        d.ports.push_back(Out("acc", wa, true));
        d.spec = {StrCat("The module should implement an accumulator: at each rising clock edge where ena is 1, acc "
                         "takes the value acc + in, where in is an unsigned ",
                         wi, "-bit number and the ", wa, "-bit sum wraps around modulo 2^", wa,
                         ". When ena is 0, acc keeps its value."),
                  StrCat(ResetText(r, "acc is set to 0"), " The reset has priority over ena."), kClockSentence};
        d.body = StrCat(AlwaysHead(r), "    if (", ResetName(r), ")\n      acc <= ", Lit(wa, 0),
                        ";\n    else if (ena)\n      acc <= acc + in;\n  end\n");
        d.think = StrCat("acc + in is evaluated at the ", wa,
                         "-bit width of acc, with in zero-extended, so the wrap modulo 2^", wa, " comes for free.",
                         ResetThink(r));
        out.push_back(d);
      }
    }
  }
}

void Registers(std::vector<Design>& out) {
  FlipFlopBanks(out);
  ByteEnableRegisters(out);
  Accumulators(out);
}

}  // namespace

std::vector<Design> SequentialDesigns() {
  std::vector<Design> out;
  ModCounters(out);
  RangeCounters(out);
  SaturatingCounters(out);
  SerialShiftRegisters(out);
  LoadShiftRegisters(out);
  SequenceDetectors(out);
  TableMachines(out);
  EdgeDetectors(out);
  Registers(out);
  return out;
}

}  // namespace gk::data
