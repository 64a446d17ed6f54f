// Combinational template families.
#include <cctype>
#include <cstdio>
#include <set>

#include "tools/data/verilog_templates.h"
#include "util/result.h"

namespace gk::data {

std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

std::string Lit(int width, uint64_t value) { return StrCat(width, "'d", value); }

std::string A(uint64_t n) {
  const std::string digits = std::to_string(n);
  const bool vowel = digits[0] == '8' || n == 11 || n == 18 || (n >= 11000 && n < 12000) || (n >= 18000 && n < 19000);
  return vowel ? "an" : "a";
}

std::string Hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(value));
  return buf;
}

int InputBits(const Design& d) {
  int bits = 0;
  for (const Port& p : d.ports) bits += p.input ? p.width : 0;
  return bits;
}

void FinishCombinational(Design& d) {
  d.exhaustive = InputBits(d) <= 12;
  d.random_cycles = d.exhaustive ? 50 : 300;
}

namespace {

Design Comb(const std::string& family, const std::string& slug) {
  Design d;
  d.family = family;
  d.slug = slug;
  return d;
}

void Add(std::vector<Design>& out, Design d) {
  FinishCombinational(d);
  out.push_back(std::move(d));
}

std::string Bits(int w) { return w == 1 ? "1-bit" : StrCat(w, "-bit"); }

// ---- gates: bitwise operations on vectors ----

struct BitOp {
  const char* name;
  const char* op;
  bool negate;
  const char* rule;  // what out[i] is
};
const BitOp kBitOps[] = {
    {"AND", "&", false, "1 only when both a[i] and b[i] are 1"},
    {"OR", "|", false, "1 when at least one of a[i] and b[i] is 1"},
    {"XOR", "^", false, "1 when a[i] and b[i] differ"},
    {"NAND", "&", true, "0 only when both a[i] and b[i] are 1"},
    {"NOR", "|", true, "1 only when both a[i] and b[i] are 0"},
    {"XNOR", "^", true, "1 when a[i] and b[i] are equal"},
};

std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void BitwiseGates(std::vector<Design>& out) {
  // Width 1 would be a single gate, which verilog-eval asks for (andgate, norgate, ...).
  for (int w : {2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64}) {
    for (const BitOp& op : kBitOps) {
      Design d = Comb("gates", StrCat("bitwise_", Lower(op.name), "_w", w));
      d.ports = {In("a", w), In("b", w), Out("out", w)};
      const std::string expr = op.negate ? StrCat("~(a ", op.op, " b)") : StrCat("a ", op.op, " b");
      d.spec = {StrCat("The module should compute the bitwise ", op.name, " of the ", w,
                       "-bit vectors a and b. For every bit position i, out[i] is ", op.rule, ".")};
      d.body = StrCat("  assign out = ", expr, ";\n");
      d.think = StrCat(
          "Each bit of out depends only on the bits of a and b at the same position, so one continuous assignment with "
          "a bitwise operator covers all ",
          w, " bits at once: out = ", expr, ".");
      Add(out, d);
    }
  }
}

void GateChains(std::vector<Design>& out) {
  // Two gates in a row, bit by bit: out = (a OP1 b) OP2 c, c optionally inverted.
  const std::pair<const char*, const char*> ops[] = {{"AND", "&"}, {"OR", "|"}, {"XOR", "^"}};
  for (int w : {1, 2, 4, 8, 12, 16, 32}) {
    for (const auto& op1 : ops) {
      for (const auto& op2 : ops) {
        for (bool inv : {false, true}) {
          Design d =
              Comb("gates", StrCat("gates3_", Lower(op1.first), "_", Lower(op2.first), inv ? "_nc" : "", "_w", w));
          d.ports = {In("a", w), In("b", w), In("c", w), Out("out", w)};
          const std::string c_text = inv ? "(NOT c)" : "c";
          const std::string formula = StrCat("out = (a ", op1.first, " b) ", op2.first, " ", c_text);
          const std::string expr = StrCat("(a ", op1.second, " b) ", op2.second, inv ? " ~c" : " c");
          d.spec = {
              w == 1
                  ? StrCat("The module should compute ", formula, ".")
                  : StrCat(
                        "The module should compute ", formula, " on the ", w,
                        "-bit vectors a, b and c, bit by bit: for every position i, a[i] and b[i] are combined with ",
                        op1.first, ", and that result is combined with ", inv ? "the inverse of " : "", "c[i] using ",
                        op2.first, " to give out[i].")};
          d.body = StrCat("  assign out = ", expr, ";\n");
          d.think =
              StrCat("The function is two gates in sequence, and with bitwise operators the same expression works for ",
                     w == 1 ? "a single bit" : StrCat("all ", w, " bits"), ": out = ", expr, ".");
          Add(out, d);
        }
      }
    }
  }
}

void Gates(std::vector<Design>& out) {
  BitwiseGates(out);
  GateChains(out);
}

// ---- reduce: one gate across all bits of a vector ----

void Reduce(std::vector<Design>& out) {
  struct R {
    const char* name;
    const char* op;
    const char* rule;
    bool corner;  // needs the all-ones / all-zeros inputs random values rarely give
  };
  const R kOps[] = {
      {"and", "&", "1 exactly when every bit of in is 1", true},
      {"or", "|", "1 when at least one bit of in is 1, and 0 only when in is all zeros", true},
      {"xor", "^", "1 when in contains an odd number of 1 bits (the XOR of all bits)", false},
      {"nand", "~&", "0 exactly when every bit of in is 1, and 1 otherwise", true},
      {"nor", "~|", "1 exactly when every bit of in is 0", true},
      {"xnor", "~^", "1 when in contains an even number of 1 bits (the XNOR of all bits)", false},
  };
  std::vector<int> widths;
  for (int w = 2; w <= 32; ++w) widths.push_back(w);
  for (int w : {40, 48, 64, 100, 128}) widths.push_back(w);
  for (int w : widths) {
    for (const R& op : kOps) {
      if (w == 8 && std::string(op.name) == "xor") continue;  // verilog-eval's reduction (8-bit parity)
      Design d = Comb("reduce", StrCat("reduce_", op.name, "_w", w));
      d.ports = {In("in", w, op.corner ? CornerExpr(w) : ""), Out("out")};
      d.spec = {
          StrCat("The module should reduce the ", w, "-bit input in to a single bit: out should be ", op.rule, ".")};
      d.body = StrCat("  assign out = ", op.op, "in;\n");
      d.think = StrCat("A reduction operator applies one gate across every bit of a vector, so ", op.op,
                       "in computes the required function of all ", w, " bits in a single expression.");
      Add(out, d);
    }
  }
}

// ---- truthtable: random functions of 3 and 4 one-bit inputs ----

void TruthTables(std::vector<Design>& out) {
  for (uint32_t mask = 1; mask < 255; ++mask) {
    // 0xAC is verilog-eval's truthtable1 and 0xFE is its kmap1 (a | b | c).
    if (mask == 0xAC || mask == 0xFE) continue;
    Design d = Comb("truthtable", StrCat("truthtable3_", Hex(mask)));
    d.ports = {In("a"), In("b"), In("c"), Out("out", 1, true)};
    std::string table = "  a b c | out\n  ------+----";
    std::vector<std::string> ones, labels;
    for (int row = 0; row < 8; ++row) {
      const int v = (mask >> row) & 1;
      table += StrCat("\n  ", (row >> 2) & 1, " ", (row >> 1) & 1, " ", row & 1, " | ", v);
      if (v) {
        ones.push_back(StrCat("3'b", (row >> 2) & 1, (row >> 1) & 1, row & 1));
        labels.push_back(StrCat((row >> 2) & 1, (row >> 1) & 1, row & 1));
      }
    }
    d.spec = {"The module should implement the combinational function of a, b and c given by this truth table:", table};
    d.body = StrCat("  always @(*) begin\n    case ({a, b, c})\n      ", Join(ones, ", "),
                    ": out = 1'b1;\n      default: out = 1'b0;\n    endcase\n  end\n");
    d.think = StrCat("The table has out = 1 only for abc = ", Join(labels, ", "),
                     ". A case statement on {a, b, c} that sets out to 1 for those rows and to 0 by default reproduces "
                     "the table exactly.");
    Add(out, d);
  }
  std::mt19937_64 rng(0x7417ab1e4ULL);  // fixed: the catalogue must not depend on --seed
  std::set<uint32_t> seen;
  while (seen.size() < 300) {
    const uint32_t mask = uint32_t(Below(rng, 0xFFFE) + 1);
    if (!seen.insert(mask).second) continue;
    Design d = Comb("truthtable", StrCat("minterms4_", Hex(mask)));
    d.ports = {In("a"), In("b"), In("c"), In("d"), Out("out", 1, true)};
    std::vector<std::string> values, lits;
    for (int v = 0; v < 16; ++v) {
      if (!((mask >> v) & 1)) continue;
      values.push_back(std::to_string(v));
      lits.push_back(Lit(4, v));
    }
    const std::string list =
        values.size() == 1 ? values[0] : Join({values.begin(), values.end() - 1}, ", ") + " or " + values.back();
    d.spec = {
        StrCat("Treat the four inputs as the 4-bit unsigned number {a, b, c, d}, with a as the most significant bit. "
               "out should be 1 when that number is ",
               list, ", and 0 for every other value.")};
    d.body = StrCat("  always @(*) begin\n    case ({a, b, c, d})\n      ", Join(lits, ", "),
                    ": out = 1'b1;\n      default: out = 1'b0;\n    endcase\n  end\n");
    d.think = StrCat("The function is given as the list of input values (minterms) for which out is 1: ", list,
                     ". Concatenating the inputs into {a, b, c, d} and matching those values in a case statement, with "
                     "out = 0 as the default, implements it.");
    Add(out, d);
  }
}

// ---- mux ----

void Mux2(std::vector<Design>& out) {
  for (int w : {2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64}) {
    for (bool inv : {false, true}) {
      Design d = Comb("mux", StrCat("mux2", inv ? "_inv" : "", "_w", w));
      d.ports = {In("a", w), In("b", w), In("sel"), Out("out", w)};
      d.spec = {StrCat("The module should implement ", A(w), " ", w, "-bit wide 2-to-1 multiplexer. When sel is ",
                       inv ? "1" : "0", ", out should be a; when sel is ", inv ? "0" : "1", ", out should be b.")};
      d.body = inv ? "  assign out = sel ? a : b;\n" : "  assign out = sel ? b : a;\n";
      d.think = StrCat("A 2-to-1 multiplexer is one conditional expression; here sel = ", inv ? "1" : "0",
                       " picks a, so out = ", inv ? "sel ? a : b" : "sel ? b : a", " for all ", w, " bits.");
      Add(out, d);
    }
  }
}

void Mux4(std::vector<Design>& out) {
  for (int w : {1, 2, 3, 4, 5, 6, 8, 12, 16, 32}) {
    Design d = Comb("mux", StrCat("mux4_w", w));
    d.ports = {In("a", w), In("b", w), In("c", w), In("d", w), In("sel", 2), Out("out", w, true)};
    d.spec = {StrCat(
        "The module should implement ", A(w), " ", Bits(w),
        " wide 4-to-1 multiplexer: sel = 0 selects a, sel = 1 selects b, sel = 2 selects c and sel = 3 selects d.")};
    d.body =
        "  always @(*) begin\n    case (sel)\n      2'd0: out = a;\n      2'd1: out = b;\n      2'd2: out = c;\n"
        "      default: out = d;\n    endcase\n  end\n";
    d.think =
        "A case statement on the 2-bit sel covers the four choices; since out is assigned in every branch the always "
        "block stays purely combinational.";
    Add(out, d);
  }
}

void MuxWithDefault(std::vector<Design>& out) {
  // N inputs with a default for the unused select codes.
  for (int n : {3, 5, 6, 7, 9, 10, 12}) {
    for (int w : {1, 4, 8, 16}) {
      for (bool ones : {false, true}) {
        // verilog-eval's always_case (6 x 4 bits, default 0) and mux9to1v (9 x 16 bits, default 1s).
        if ((n == 6 && w == 4 && !ones) || (n == 9 && w == 16 && ones)) continue;
        const int sw = BitsFor(n);
        Design d = Comb("mux", StrCat("mux", n, "_w", w, ones ? "_dflt1" : "_dflt0"));
        for (int k = 0; k < n; ++k) d.ports.push_back(In(StrCat("in", k), w));
        d.ports.push_back(In("sel", sw));
        d.ports.push_back(Out("out", w, true));
        const std::string dflt = ones ? StrCat("{", w, "{1'b1}}") : Lit(w, 0);
        d.spec = {StrCat("The module should implement ", A(w), " ", Bits(w), " wide ", n,
                         "-to-1 multiplexer: out should be ",
                         "in0 when sel is 0, in1 when sel is 1, and so on up to in", n - 1, " when sel is ", n - 1,
                         ". For any other value of sel, out should be all ", ones ? "ones" : "zeros", ".")};
        std::string cases;
        for (int k = 0; k < n; ++k) cases += StrCat("      ", Lit(sw, k), ": out = in", k, ";\n");
        d.body = StrCat("  always @(*) begin\n    case (sel)\n", cases, "      default: out = ", dflt,
                        ";\n    endcase\n  end\n");
        d.think = StrCat("sel has ", sw, " bits, so it can name ", 1 << sw, " inputs but only ", n,
                         " exist. A case statement lists the ", n, " valid codes and its default branch gives the all-",
                         ones ? "ones" : "zeros", " value for the rest.");
        Add(out, d);
      }
    }
  }
}

void BitSelects(std::vector<Design>& out) {
  for (int n : {4, 8, 16, 32, 64, 128, 512, 1024}) {  // 256 is verilog-eval's mux256to1
    Design d = Comb("mux", StrCat("bitsel", n));
    d.ports = {In("in", n), In("sel", BitsFor(n)), Out("out")};
    d.spec = {
        StrCat("The module should implement ", A(n), " ", n, "-to-1 multiplexer of single bits packed into the ", n,
               "-bit vector in: out should be in[sel], so sel = 0 selects in[0], sel = 1 selects in[1], and so on.")};
    d.body = "  assign out = in[sel];\n";
    d.think =
        "Indexing a vector with a variable selects one bit, so out = in[sel] is the whole multiplexer; the synthesiser "
        "builds the selection tree.";
    Add(out, d);
  }
}

void WordSelects(std::vector<Design>& out) {
  for (int n : {4, 8, 16, 32, 64}) {
    for (int w : {2, 3, 4, 5, 8, 16}) {
      Design d = Comb("mux", StrCat("wordsel", n, "_w", w));
      d.ports = {In("in", n * w), In("sel", BitsFor(n)), Out("out", w)};
      d.spec = {StrCat("The ", n * w, "-bit input in holds ", n, " words of ", w, " bits each: word 0 is in[", w - 1,
                       ":0], word 1 is in[", 2 * w - 1, ":", w,
                       "], and so on. The module should output on out the word selected by sel.")};
      d.body = StrCat("  assign out = in[sel * ", w, " +: ", w, "];\n");
      d.think = StrCat("Word k starts at bit k * ", w, ", so an indexed part-select in[sel * ", w, " +: ", w,
                       "] picks the selected word with a variable base and a constant width.");
      Add(out, d);
    }
  }
}

void Muxes(std::vector<Design>& out) {
  Mux2(out);
  Mux4(out);
  MuxWithDefault(out);
  BitSelects(out);
  WordSelects(out);
}

// ---- decode: decoders, one-hot encoders, Gray code, thermometer ----

void BinaryDecoders(std::vector<Design>& out) {
  for (int n = 1; n <= 6; ++n) {
    const int m = 1 << n;
    for (bool en : {false, true}) {
      for (bool low : {false, true}) {
        Design d = Comb("decode", StrCat("decoder", n, "to", m, en ? "_en" : "", low ? "_low" : ""));
        d.ports = {In("in", n)};
        if (en) d.ports.push_back(In("en", 1, "($random(seed) & 3) != 0"));
        d.ports.push_back(Out("out", m));
        std::string text = StrCat("The module should implement ", A(n), " ", n, "-to-", m, " decoder with active-",
                                  low ? "low" : "high", " outputs: out[k] is ", low ? "0" : "1",
                                  " exactly when in equals k, and every other bit of out is ", low ? "1" : "0", ".");
        if (en) text += StrCat(" When en is 0, every bit of out is ", low ? "1" : "0", ", whatever the value of in.");
        d.spec = {text};
        std::string expr = StrCat("(", Lit(m, 1), " << in)");
        if (en) expr = StrCat("en ? ", expr, " : ", Lit(m, 0));
        d.body = StrCat("  assign out = ", low ? "~(" + expr + ")" : expr, ";\n");
        d.think = StrCat("Shifting a single 1 left by in sets exactly bit in of ", A(m), " ", m, "-bit vector",
                         en ? ", and en gates it to all zeros" : "",
                         low ? "; inverting the result makes the outputs active low." : ".");
        Add(out, d);
      }
    }
  }
}

void OneHotEncoders(std::vector<Design>& out) {
  for (int n = 2; n <= 5; ++n) {
    const int m = 1 << n;
    for (bool valid : {false, true}) {
      Design d = Comb("decode", StrCat("onehot", m, "_to_bin", valid ? "_valid" : ""));
      const std::string onehot =
          StrCat("(($random(seed) & 3) != 0) ? (", Lit(m, 1), " << ($random(seed) & ", m - 1, ")) : $random(seed)");
      d.ports = {In("in", m, onehot), Out("out", n, true)};
      if (valid) d.ports.push_back(Out("valid"));
      std::string text = StrCat("The ", m,
                                "-bit input in is meant to be one-hot. When exactly one bit in[k] is 1, out should be "
                                "its index k. For any other input (no bit set, or more than one), out should be 0.");
      if (valid) text += " valid should be 1 exactly when in has exactly one bit set.";
      d.spec = {text};
      d.body = StrCat("  integer i;\n\n  always @(*) begin\n    out = 0;\n    for (i = 0; i < ", m,
                      "; i = i + 1)\n      if (in == (", Lit(m, 1), " << i)) out = i;\n  end\n");
      if (valid) d.body += "\n  assign valid = (in != 0) && ((in & (in - 1'b1)) == 0);\n";
      d.think = StrCat(
          "Comparing in with each one-hot pattern 1 << i in a loop finds the index when exactly one bit is set and "
          "leaves the default 0 otherwise.",
          valid ? " A value is one-hot when it is nonzero and in & (in - 1), which clears its lowest set bit, is zero."
                : "");
      Add(out, d);
    }
  }
}

void GrayCodes(std::vector<Design>& out) {
  for (int w = 2; w <= 16; ++w) {
    Design d = Comb("decode", StrCat("bin2gray_w", w));
    d.ports = {In("bin", w), Out("gray", w)};
    d.spec = {StrCat("The module should convert the ", w, "-bit binary number bin to its reflected Gray code: gray[",
                     w - 1, "] = bin[", w - 1, "], and gray[i] = bin[i+1] XOR bin[i] for every lower bit i.")};
    d.body = "  assign gray = bin ^ (bin >> 1);\n";
    d.think =
        "Each Gray bit is the XOR of a binary bit and the bit above it; shifting bin right by one lines every bit up "
        "with its upper neighbour (and a 0 for the top bit), so gray = bin ^ (bin >> 1).";
    Add(out, d);
    Design g = Comb("decode", StrCat("gray2bin_w", w));
    g.ports = {In("gray", w), Out("bin", w, true)};
    g.spec = {StrCat("The module should convert the ", w, "-bit reflected Gray code gray back to binary: bin[", w - 1,
                     "] = gray[", w - 1,
                     "], and going down, bin[i] = bin[i+1] XOR gray[i]. Equivalently, bin[i] is the XOR of gray[",
                     w - 1, ":i].")};
    g.body = StrCat("  integer i;\n\n  always @(*) begin\n    for (i = 0; i < ", w,
                    "; i = i + 1)\n      bin[i] = ^(gray >> i);\n  end\n");
    g.think =
        "Unrolling bin[i] = bin[i+1] ^ gray[i] shows that bin[i] is the XOR of all Gray bits from i upward, which is "
        "the reduction XOR of gray >> i; computing it that way avoids a chain that reads its own output.";
    Add(out, g);
  }
}

void Thermometers(std::vector<Design>& out) {
  for (int n = 2; n <= 6; ++n) {
    const int m = (1 << n) - 1;
    Design d = Comb("decode", StrCat("thermometer", n, "to", m));
    d.ports = {In("in", n), Out("out", m)};
    d.spec = {StrCat(
        "The module should implement a thermometer decoder: when in has the value k, the lowest k bits of the ", m,
        "-bit output out are 1 and the other bits are 0. So in = 0 gives all zeros and in = ", m, " gives all ones.")};
    d.body = StrCat("  assign out = (", Lit(m, 1), " << in) - 1'b1;\n");
    d.think = StrCat("(1 << k) - 1 has exactly the lowest k bits set. Evaluated at ", m, " bits, 1 << ", m,
                     " wraps to 0 and 0 - 1 is all ones, so even the largest input needs no special case.");
    Add(out, d);
  }
}

void Decoders(std::vector<Design>& out) {
  BinaryDecoders(out);
  OneHotEncoders(out);
  GrayCodes(out);
  Thermometers(out);
}

// ---- prio: priority encoders ----

void PriorityEncoders(std::vector<Design>& out) {
  for (int w : {3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64}) {
    const int pw = BitsFor(w);
    // Sparse random inputs, so that high bit positions also come first.
    const std::string sparse = StrCat("(($random(seed) & 7) == 0) ? ", Lit(w, 0), " : (", RandomExpr(w), " & ",
                                      RandomExpr(w), " & ", RandomExpr(w), ")");
    for (bool lowest : {true, false}) {
      for (bool valid : {false, true}) {
        if (lowest && !valid && (w == 4 || w == 8)) continue;  // verilog-eval's always_case2 and always_casez
        Design d = Comb("prio", StrCat("prio_", lowest ? "low" : "high", "_w", w, valid ? "_valid" : ""));
        d.ports = {In("in", w, sparse), Out("pos", pw, true)};
        if (valid) d.ports.push_back(Out("valid"));
        std::string text = StrCat("The module should implement a priority encoder for ", A(w), " ", w,
                                  "-bit input: pos should be the index of the ", lowest ? "least" : "most",
                                  " significant bit of in that is 1.");
        text += valid ? " valid should be 1 when at least one bit of in is 1. When in is all zeros, valid and pos "
                        "should both be 0."
                      : " If no bit of in is 1, pos should be 0.";
        d.spec = {text};
        const std::string loop =
            lowest ? StrCat("for (i = ", w - 1, "; i >= 0; i = i - 1)") : StrCat("for (i = 0; i < ", w, "; i = i + 1)");
        d.body = StrCat("  integer i;\n\n  always @(*) begin\n    pos = 0;\n    ", loop,
                        "\n      if (in[i]) pos = i;\n  end\n");
        if (valid) d.body += "\n  assign valid = |in;\n";
        d.think = StrCat(
            "Scanning the bits in a loop and overwriting pos at each 1 leaves the index of the last 1 visited, so the "
            "loop runs from the ",
            lowest ? "top bit down" : "bottom bit up", " to let the ", lowest ? "lowest" : "highest",
            " set bit win; pos starts at 0 for the all-zero input.",
            valid ? " valid is just the OR reduction of in." : "");
        Add(out, d);
      }
    }
  }
}

// ---- addsub: adders, subtractors, adder-subtractors ----

const int kArithWidths[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64};

Design Adder(int w, bool cin, bool cout) {
  Design d = Comb("addsub", StrCat("add_w", w, cin ? "_cin" : "", cout ? "_cout" : ""));
  d.ports = {In("a", w), In("b", w)};
  if (cin) d.ports.push_back(In("cin"));
  d.ports.push_back(Out("sum", w));
  if (cout) d.ports.push_back(Out("cout"));
  const std::string operands = cin ? "a + b + cin" : "a + b";
  std::string text =
      StrCat("The module should add the ", w, "-bit unsigned numbers a and b", cin ? " and the carry input cin" : "",
             ". sum should be the low ", w, " bits of ", operands, ".");
  if (cout)
    text += StrCat(" cout should be the carry out of the top bit, that is, bit ", w, " of the full ", w + 1,
                   "-bit result.");
  d.spec = {text};
  d.body = cout ? StrCat("  assign {cout, sum} = ", operands, ";\n") : StrCat("  assign sum = ", operands, ";\n");
  d.think =
      cout ? StrCat("Assigning ", operands, " to the ", w + 1, "-bit concatenation {cout, sum} makes the addition ",
                    w + 1, " bits wide, so the carry lands in cout without extra logic.")
           : StrCat("Without a carry output the sum simply wraps modulo 2^", w, ": assigning ", operands, " to the ", w,
                    "-bit sum keeps the low bits.");
  return d;
}

Design Subtractor(int w, bool bin, bool borrow) {
  Design d = Comb("addsub", StrCat("sub_w", w, bin ? "_bin" : "", borrow ? "_bout" : ""));
  d.ports = {In("a", w), In("b", w)};
  if (bin) d.ports.push_back(In("bin"));
  d.ports.push_back(Out("diff", w));
  if (borrow) d.ports.push_back(Out("borrow"));
  const std::string operands = bin ? "a - b - bin" : "a - b";
  std::string text =
      StrCat("The module should subtract the ", w, "-bit unsigned number b", bin ? " and the borrow input bin" : "",
             " from a. diff should be the low ", w, " bits of ", operands, " (wrapping around modulo 2^", w, ").");
  if (borrow)
    text += StrCat(" borrow should be 1 when the true result of ", operands, " is negative, and 0 otherwise.");
  d.spec = {text};
  const std::string wide = bin ? "{1'b0, a} - {1'b0, b} - bin" : "{1'b0, a} - {1'b0, b}";
  d.body = borrow ? StrCat("  assign {borrow, diff} = ", wide, ";\n") : StrCat("  assign diff = ", operands, ";\n");
  d.think =
      borrow ? StrCat("Extending both operands with a zero top bit and subtracting at ", w + 1, " bits makes bit ", w,
                      " of the result 1 exactly when the difference goes below zero, which is the borrow.")
             : StrCat("Two's complement subtraction at ", w, " bits wraps modulo 2^", w, ", which is what diff needs.");
  return d;
}

Design AdderSubtractor(int w, bool ovf) {
  Design d = Comb("addsub", StrCat("addsub_w", w, ovf ? "_ovf" : ""));
  d.ports = {In("a", w), In("b", w), In("sub"), Out("out", w)};
  if (ovf) d.ports.push_back(Out("overflow"));
  std::string text = StrCat("The module should implement ", A(w), " ", w,
                            "-bit adder-subtractor: when sub is 0, out should be a + b; when sub is 1, out should be a "
                            "- b. Both results wrap around modulo 2^",
                            w, ".");
  if (ovf)
    text +=
        " overflow should be 1 when the operation overflows if a, b and out are read as signed two's complement "
        "numbers, that is, when the true signed result does not fit in out.";
  d.spec = {text};
  d.body = "  assign out = sub ? a - b : a + b;\n";
  if (ovf) {
    const std::string t = std::to_string(w - 1);
    d.body += StrCat("  assign overflow = sub ? (a[", t, "] != b[", t, "]) && (out[", t, "] != a[", t, "])\n",
                     "                     : (a[", t, "] == b[", t, "]) && (out[", t, "] != a[", t, "]);\n");
  }
  d.think = StrCat("One conditional picks the sum or the difference.",
                   ovf ? " Signed overflow happens when an addition of two same-sign numbers, or a subtraction of "
                         "numbers of opposite signs, gives a result whose sign differs from a's."
                       : "");
  return d;
}

void Adders(std::vector<Design>& out) {
  for (int w : kArithWidths) {
    for (bool cin : {false, true}) {
      for (bool cout : {false, true}) {
        if (w == 1 && cout) continue;  // verilog-eval's hadd and fadd
        Add(out, Adder(w, cin, cout));
      }
    }
    for (bool bin : {false, true}) {
      for (bool borrow : {false, true}) Add(out, Subtractor(w, bin, borrow));
    }
    if (w == 1) continue;  // an adder-subtractor needs a sign bit besides the value bits
    for (bool ovf : {false, true}) Add(out, AdderSubtractor(w, ovf));
  }
}

// ---- compare: relations, three-way comparators, min/max, absolute value ----

const int kCompareWidths[] = {2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32};

// a and b are equal a quarter of the time, which uniform random values would almost never be.
void EqualBiased(Design& d, int w) {
  d.stim_decls = StrCat("reg ", Range(w), "r;\n");
  d.step = StrCat("r = ", RandomExpr(w), ";\na <= r;\nb <= (($random(seed) & 3) == 0) ? r : ", RandomExpr(w), ";\n");
}

struct Rel {
  const char* name;
  const char* op;
  const char* words;
};
const Rel kRels[] = {{"eq", "==", "equal to"},    {"ne", "!=", "not equal to"},
                     {"lt", "<", "less than"},    {"le", "<=", "less than or equal to"},
                     {"gt", ">", "greater than"}, {"ge", ">=", "greater than or equal to"}};

Design Relation(int w, const Rel& r, bool sgn) {
  const bool eq_like = r.name[0] == 'e' || r.name[0] == 'n';
  Design d = Comb("compare", StrCat("cmp_", r.name, sgn ? "_s" : "", "_w", w));
  d.ports = {In("a", w), In("b", w), Out("out")};
  EqualBiased(d, w);
  d.spec = {StrCat("The module should compare the ", w, "-bit inputs a and b: out should be 1 when a is ", r.words,
                   " b, and 0 otherwise.",
                   eq_like ? ""
                   : sgn   ? " Compare them as signed two's complement numbers."
                           : " Compare them as unsigned numbers.")};
  d.body =
      sgn ? StrCat("  assign out = $signed(a) ", r.op, " $signed(b);\n") : StrCat("  assign out = a ", r.op, " b;\n");
  d.think = sgn ? StrCat("Ports are unsigned by default, so both operands are wrapped in $signed() to make ", r.op,
                         " a signed comparison.")
                : StrCat("A relational operator on the two unsigned vectors gives the 1-bit result directly: out = a ",
                         r.op, " b.");
  return d;
}

Design ThreeWay(int w, bool sgn) {
  const std::string a = sgn ? "$signed(a)" : "a", b = sgn ? "$signed(b)" : "b";
  Design d = Comb("compare", StrCat("cmp3", sgn ? "_s" : "", "_w", w));
  d.ports = {In("a", w), In("b", w), Out("lt"), Out("eq"), Out("gt")};
  EqualBiased(d, w);
  d.spec = {StrCat("The module should compare the ", w, "-bit inputs a and b as ",
                   sgn ? "signed two's complement" : "unsigned",
                   " numbers. Exactly one output is 1: lt when a < b, eq when a == b, and gt when a > b.")};
  d.body = StrCat("  assign lt = ", a, " < ", b, ";\n  assign eq = a == b;\n  assign gt = ", a, " > ", b, ";\n");
  d.think =
      StrCat("Three relational operators give the three flags; equality does not depend on signedness, while < and > ",
             sgn ? "need $signed() operands." : "compare unsigned values.");
  return d;
}

Design MinMax(int w, bool sgn, bool mx) {
  const std::string a = sgn ? "$signed(a)" : "a", b = sgn ? "$signed(b)" : "b";
  Design m = Comb("compare", StrCat(mx ? "max" : "min", sgn ? "_s" : "", "_w", w));
  m.ports = {In("a", w), In("b", w), Out("out", w)};
  EqualBiased(m, w);
  m.spec = {StrCat("The module should output on out the ", mx ? "larger" : "smaller", " of the ", w,
                   "-bit inputs a and b, compared as ", sgn ? "signed two's complement" : "unsigned", " numbers.")};
  m.body = StrCat("  assign out = (", a, mx ? " > " : " < ", b, ") ? a : b;\n");
  m.think = StrCat("A comparison chooses between the two operands: out = (", a, mx ? " > " : " < ", b,
                   ") ? a : b. When they are equal either one is correct.");
  return m;
}

Design AbsoluteValue(int w) {
  Design d = Comb("compare", StrCat("abs_w", w));
  d.ports = {In("in", w), Out("out", w)};
  d.spec = {StrCat("in is ", A(w), " ", w,
                   "-bit signed two's complement number. The module should output its absolute value on the ", w,
                   "-bit output out. The most negative value, -2^", w - 1,
                   ", has no positive counterpart and should map to itself.")};
  d.body = StrCat("  assign out = in[", w - 1, "] ? -in : in;\n");
  d.think = StrCat("The sign bit in[", w - 1, "] says whether to negate; two's complement negation at ", w,
                   " bits maps the most negative value to itself, as required.");
  return d;
}

void Comparators(std::vector<Design>& out) {
  for (int w : kCompareWidths) {
    for (const Rel& r : kRels) {
      for (bool sgn : {false, true}) {
        if (sgn && (r.name[0] == 'e' || r.name[0] == 'n')) continue;  // signedness does not change equality
        if (w == 2 && std::string(r.name) == "eq") continue;          // verilog-eval's mt2015_eq2
        Add(out, Relation(w, r, sgn));
      }
    }
    for (bool sgn : {false, true}) {
      Add(out, ThreeWay(w, sgn));
      for (bool mx : {false, true}) Add(out, MinMax(w, sgn, mx));
    }
    Add(out, AbsoluteValue(w));
  }
}

// ---- bits: population count, constant arithmetic, leading/trailing zeros, bit order ----

void PopCounts(std::vector<Design>& out) {
  for (int w : {2, 4, 5, 6, 7, 8, 10, 12, 15, 16, 20, 24, 31, 32, 40, 48, 63, 64, 100, 127, 128}) {
    const int ow = BitsFor(uint64_t(w) + 1);
    Design d = Comb("bits", StrCat("popcount", w));
    d.ports = {In("in", w), Out("out", ow, true)};
    d.spec = {StrCat("The module should count the 1 bits of the ", w,
                     "-bit input in (a population count) and output the count on out.")};
    d.body = StrCat("  integer i;\n\n  always @(*) begin\n    out = 0;\n    for (i = 0; i < ", w,
                    "; i = i + 1)\n      out = out + in[i];\n  end\n");
    d.think = StrCat("A loop adds each bit into out; the count can reach ", w, ", which needs ", ow, " bits.");
    Add(out, d);
  }
}

void ConstantArithmetic(std::vector<Design>& out) {
  std::mt19937_64 rng(0xc0457a47ULL);
  for (int w : {4, 6, 8, 12, 16}) {
    std::set<uint64_t> ks;
    while (ks.size() < 4) ks.insert(Below(rng, (uint64_t(1) << w) - 1) + 1);
    for (uint64_t k : ks) {
      Design d = Comb("bits", StrCat("addk_w", w, "_k", k));
      d.ports = {In("a", w), Out("out", w)};
      d.spec = {StrCat("The module should add the constant ", k, " to the ", w, "-bit input a. out should be the low ",
                       w, " bits of a + ", k, ", so the result wraps around modulo 2^", w, ".")};
      d.body = StrCat("  assign out = a + ", Lit(w, k), ";\n");
      d.think =
          StrCat("Adding a sized constant keeps the expression ", w, " bits wide, so the wrap-around is automatic.");
      Add(out, d);
    }
  }
  const int kMulConsts[] = {3, 5, 6, 7, 9, 10, 11, 12, 13, 15};
  for (int w : {4, 6, 8, 12, 16}) {
    std::set<int> ks;
    while (ks.size() < 3) ks.insert(kMulConsts[Below(rng, 10)]);
    for (int k : ks) {
      const int ow = w + BitsFor(uint64_t(k) + 1);
      Design d = Comb("bits", StrCat("mulk_w", w, "_k", k));
      d.ports = {In("a", w), Out("out", ow)};
      d.spec = {StrCat("The module should multiply the ", w, "-bit unsigned input a by the constant ", k, ". The ", ow,
                       "-bit output out holds the full product.")};
      d.body = StrCat("  assign out = a * ", Lit(ow, k), ";\n");
      d.think =
          StrCat("The product of ", A(w), " ", w, "-bit number and ", k, " fits in ", ow, " bits; making the constant ",
                 ow, " bits wide evaluates the multiplication at the output width so no bits are lost.");
      Add(out, d);
    }
  }
}

void ZeroCounts(std::vector<Design>& out) {
  for (int w : {4, 5, 8, 12, 16, 32, 64}) {
    const int ow = BitsFor(uint64_t(w) + 1);
    for (bool leading : {true, false}) {
      Design d = Comb("bits", StrCat(leading ? "clz" : "ctz", w));
      const std::string shift = StrCat("($unsigned($random(seed)) % ", w, ")");
      const std::string stim = StrCat("(($random(seed) & 7) == 0) ? ", Lit(w, 0), " : (", RandomExpr(w),
                                      leading ? " >> " : " << ", shift, ")");
      d.ports = {In("in", w, stim), Out("out", ow, true)};
      d.spec = {StrCat("The module should count the ", leading ? "leading" : "trailing", " zeros of the ", w,
                       "-bit input in: out is the number of 0 bits ", leading ? "above its most" : "below its least",
                       " significant 1 bit. When in is 0, out should be ", w, ".")};
      d.body = leading ? StrCat("  integer i;\n\n  always @(*) begin\n    out = ", w, ";\n    for (i = 0; i < ", w,
                                "; i = i + 1)\n      if (in[i]) out = ", w - 1, " - i;\n  end\n")
                       : StrCat("  integer i;\n\n  always @(*) begin\n    out = ", w, ";\n    for (i = ", w - 1,
                                "; i >= 0; i = i - 1)\n      if (in[i]) out = i;\n  end\n");
      d.think = StrCat("out starts at ", w, " for the all-zero input; a loop then visits the bits so that the ",
                       leading ? "highest" : "lowest", " 1 is seen last and sets out to the number of zeros ",
                       leading ? "above" : "below", " it.");
      Add(out, d);
    }
  }
}

void Extensions(std::vector<Design>& out) {
  const std::pair<int, int> kExtends[] = {{4, 8}, {8, 16}, {8, 32}, {5, 12}, {16, 32}, {12, 16}, {6, 16}, {3, 8}};
  for (const auto& [w, m] : kExtends) {
    Design d = Comb("bits", StrCat("sext", w, "to", m));
    d.ports = {In("in", w), Out("out", m)};
    d.spec = {StrCat("The module should sign-extend the ", w, "-bit two's complement input in to ", m,
                     " bits: the low ", w, " bits of out equal in, and every higher bit of out is a copy of in[", w - 1,
                     "].")};
    d.body = StrCat("  assign out = {{", m - w, "{in[", w - 1, "]}}, in};\n");
    d.think = StrCat("A replication {", m - w, "{in[", w - 1, "]}} copies the sign bit into the ", m - w,
                     " new upper bits, and concatenating in below it gives the extended value.");
    Add(out, d);
  }
}

void Reversals(std::vector<Design>& out) {
  for (int w : {4, 5, 6, 10, 12, 16, 24, 32, 64}) {  // 8 and 100 are verilog-eval's vectorr / vector100r
    Design d = Comb("bits", StrCat("reverse", w));
    d.ports = {In("in", w), Out("out", w, true)};
    d.spec = {StrCat("The module should reverse the bit order of the ", w, "-bit input in: out[i] = in[", w - 1,
                     " - i] for every i.")};
    d.body = StrCat("  integer i;\n\n  always @(*) begin\n    for (i = 0; i < ", w, "; i = i + 1)\n      out[i] = in[",
                    w - 1, " - i];\n  end\n");
    d.think = "A for loop in a combinational always block assigns each output bit from its mirrored input bit.";
    Add(out, d);
  }
}

void ByteSwaps(std::vector<Design>& out) {
  for (int w : {16, 48, 64}) {  // 32 is verilog-eval's vector2
    Design d = Comb("bits", StrCat("byteswap", w));
    d.ports = {In("in", w), Out("out", w)};
    d.spec = {StrCat("The module should reverse the byte order of the ", w,
                     "-bit input in: the lowest byte of in becomes the highest byte of out, the second-lowest becomes "
                     "the second-highest, and so on. The bit order inside each byte does not change.")};
    std::vector<std::string> bytes;
    for (int b = 0; b < w / 8; ++b) bytes.push_back(StrCat("in[", 8 * b + 7, ":", 8 * b, "]"));
    d.body = StrCat("  assign out = {", Join(bytes, ", "), "};\n");
    d.think =
        "Concatenation lists its operands from the most significant end, so listing the bytes of in from the lowest "
        "upward puts them in reverse order.";
    Add(out, d);
  }
}

void BitTricks(std::vector<Design>& out) {
  PopCounts(out);
  ConstantArithmetic(out);
  ZeroCounts(out);
  Extensions(out);
  Reversals(out);
  ByteSwaps(out);
}

// ---- shifter: combinational barrel shifters ----

void Shifters(std::vector<Design>& out) {
  for (int w : {4, 8, 16, 32, 64}) {
    const int aw = BitsFor(uint64_t(w));
    struct Op {
      const char* name;
      const char* text;
      std::string expr;
    };
    const Op kOps[] = {
        {"shl", "shifted left by amt positions, with zeros shifted in at the least significant end", "in << amt"},
        {"shr", "shifted right by amt positions, with zeros shifted in at the most significant end", "in >> amt"},
        {"sra",
         "shifted right by amt positions as a signed number: the vacated high bits are filled with copies of the sign "
         "bit",
         "$signed(in) >>> amt"},
        {"rol", "rotated left by amt positions: bits that leave the top re-enter at the bottom",
         StrCat("(in << amt) | (in >> (", w, " - amt))")},
        {"ror", "rotated right by amt positions: bits that leave the bottom re-enter at the top",
         StrCat("(in >> amt) | (in << (", w, " - amt))")},
    };
    for (const Op& op : kOps) {
      Design d = Comb("shifter", StrCat("barrel_", op.name, w));
      d.ports = {In("in", w), In("amt", aw), Out("out", w)};
      d.spec = {StrCat("The module should implement ", A(w), " ", w, "-bit barrel shifter: out should be in ", op.text,
                       ". amt can take any value from 0 to ", w - 1, ".")};
      d.body = StrCat("  assign out = ", op.expr, ";\n");
      d.think = std::string(op.name) == "sra" ? "The arithmetic shift operator >>> fills with the sign bit only when "
                                                "its operand is signed, so in is wrapped in $signed()."
                : op.name[0] == 'r'
                    ? StrCat("A rotate is the OR of two shifts in opposite directions by amt and ", w,
                             " - amt; for amt = 0 the second shift moves every bit out and contributes 0.")
                    : "The shift operator with a variable amount is the whole barrel shifter.";
      Add(out, d);
    }
    for (bool rotate : {false, true}) {
      Design d = Comb("shifter", StrCat(rotate ? "rotdir" : "shiftdir", w));
      d.ports = {In("in", w), In("amt", aw), In("left"), Out("out", w)};
      d.spec = {StrCat("When left is 1, out should be in ", rotate ? "rotated" : "shifted", " left by amt positions; ",
                       "when left is 0, out should be in ", rotate ? "rotated" : "shifted", " right by amt positions.",
                       rotate ? " In a rotation the bits that leave one end re-enter at the other end."
                              : " Zeros are shifted in at the vacated end.",
                       " in and out are ", w, " bits wide.")};
      d.body = rotate ? StrCat("  assign out = left ? (in << amt) | (in >> (", w, " - amt))\n",
                               "                   : (in >> amt) | (in << (", w, " - amt));\n")
                      : "  assign out = left ? in << amt : in >> amt;\n";
      d.think = rotate ? "Each rotation is the OR of two opposite shifts, and left chooses which of the two rotations "
                         "drives out."
                       : "left chooses between the two shift expressions with a conditional operator.";
      Add(out, d);
    }
  }
}

}  // namespace

std::vector<Design> CombinationalDesigns() {
  std::vector<Design> out;
  Gates(out);
  Reduce(out);
  TruthTables(out);
  Muxes(out);
  Decoders(out);
  PriorityEncoders(out);
  Adders(out);
  Comparators(out);
  BitTricks(out);
  Shifters(out);
  return out;
}

}  // namespace gk::data
