// The template families of `data synth-verilog`: each expands a fixed parameter grid (widths,
// constants, operations, reset styles; random truth tables and state tables come from fixed
// seeds) into Designs, so the catalogue is the same on every run and every machine. The user's
// --seed only orders it (verilog_synth.cc). Internal to src/tools/data.
//
// Combinations that coincide with a verilog-eval problem (e.g. an 8-bit rising edge detector,
// a 4-bit counter 0..15 with synchronous reset) are left out so the train set does not restate
// the benchmark.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tools/data/verilog_design.h"

namespace gk::data {

// Families: gates, reduce, truthtable, mux, decode, prio, addsub, compare, bits, shifter.
std::vector<Design> CombinationalDesigns();
// Families: counter, shiftreg, seqdet, fsm, edge, register.
std::vector<Design> SequentialDesigns();

// Shared by the two template files.
enum class ResetKind { kNone, kSync, kAsync };
inline constexpr const char* kClockSentence =
    "Assume all sequential logic is triggered on the positive edge of the clock.";

// Portable draws: mt19937_64's output is fixed by the standard, the distributions are not.
inline uint64_t Below(std::mt19937_64& rng, uint64_t n) { return rng() % n; }
std::string Join(const std::vector<std::string>& items, const std::string& sep);
// "8'd5"
std::string Lit(int width, uint64_t value);
std::string Hex(uint64_t value);
// The article for a number written in digits: "an" 8-bit, "a" 16-bit.
std::string A(uint64_t n);
// Marks a combinational design exhaustive when its inputs have at most 12 bits.
void FinishCombinational(Design& d);
int InputBits(const Design& d);

}  // namespace gk::data
