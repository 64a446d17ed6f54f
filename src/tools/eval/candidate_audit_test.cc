// The vvp assembly reader and the candidate audit on assembly as iverilog 11 writes it (lines
// taken from `iverilog -g2012 -o a.out` runs; the scorer's tests run the real compiler).
#include "tools/eval/candidate_audit.h"

#include <gtest/gtest.h>

#include "tools/eval/vvp_design.h"

namespace gk::eval {
namespace {

const char* kAssembly = R"VVP(#! /usr/bin/vvp
:ivl_version "11.0 (stable)";
:vpi_module "/usr/lib/x86_64-linux-gnu/ivl/system.vpi";
S_0x55a16e988230 .scope package, "$unit" "$unit" 2 1;
 .timescale 0 0;
P_0x55a16e9883c0 .param/l "W" 1 3 3, +C4<00000000000000000000000000000100>;
v0x55a16e9ae120_0 .var "leak", 0 0;
S_0x5606a9874fb0 .scope module, "tb" "tb" 3 42;
 .timescale -12 -12;
S_0x5606a9875140 .scope module, "good1" "RefModule" 3 81, 4 2 0, S_0x5606a9874fb0;
S_0x5606a989beb0 .scope module, "top_module1" "TopModule" 3 85, 5 1 0, S_0x5606a9874fb0;
I0x56427dfd7ea0 .island tran;
v0x55a16e9ae5b0_0 .var "out", 3 0;
    .scope S_0x5606a989beb0;
T_1 ;
    %vpi_func 5 8 "$ivl_enum_method$next" 2, enum0x55a16e94fb80, v0x55a16e9ae6e0_0 {0 0 0};
    %vpi_call/w 5 9 "$display", "%0d %s", S<0,vec4,s32>, v0x55a16e9ae7c0_0 {1 0 0};
    %force/vec4 v0x558f09505250_0;
    %vpi_call/w 5 12 "$finish" {0 0 0};
    .thread T_1;
    .scope S_0x5606a9874fb0;
T_2 ;
    %vpi_func 0 0 "$ivl_string_method$len" 32, v0x55a16e9ae7c0_0 {0 0 0};
    %release/net v0x558f09505250_0, 0, 1;
# The file index is used to find the file name in the following table.
:file_names 6;
    "N/A";
    "<interactive>";
    "-";
    "test.sv";
    "RefModule.sv";
    "TopModule.sv";
)VVP";

TEST(VvpDesignTest, ReadsScopesCallsAndRiskyConstructs) {
  const VvpDesign d = ParseVvp(kAssembly);
  ASSERT_EQ(d.files.size(), 6u);
  ASSERT_EQ(d.scopes.size(), 4u);
  EXPECT_EQ(d.scopes[1].name, "tb");
  EXPECT_TRUE(d.scopes[1].root);
  EXPECT_EQ(d.scopes[1].file, "test.sv");
  EXPECT_EQ(d.scopes[2].type, "RefModule");
  EXPECT_FALSE(d.scopes[2].root);
  EXPECT_EQ(d.scopes[2].file, "RefModule.sv");  // where it is defined, not where instantiated
  EXPECT_EQ(d.scopes[3].file, "TopModule.sv");
  EXPECT_EQ(d.scopes[3].line, 1);
  ASSERT_EQ(d.system_calls.size(), 4u);
  EXPECT_EQ(d.system_calls[2].what, "$finish");
  EXPECT_EQ(d.system_calls[2].file, "TopModule.sv");
  EXPECT_EQ(d.system_calls[2].line, 12);
  EXPECT_EQ(d.system_calls[2].scope, "TopModule");
  EXPECT_EQ(d.system_calls[3].file, "N/A");
  ASSERT_EQ(d.forces.size(), 2u);
  EXPECT_EQ(d.forces[0].what, "%force/vec4");
  EXPECT_EQ(d.forces[0].scope, "TopModule");
  EXPECT_EQ(d.forces[1].scope, "tb");
  ASSERT_EQ(d.switch_islands.size(), 1u);
  EXPECT_EQ(d.switch_islands[0].scope, "TopModule");
  ASSERT_EQ(d.unit_variables.size(), 1u);  // the parameter is not a variable
  EXPECT_EQ(d.unit_variables[0].what, "leak");
}

TEST(VvpDesignTest, GarbageIsSkipped) {
  const VvpDesign d = ParseVvp("S_x .scope\n%vpi_call\n:file_names 99;\n\"a\"\nS_ .scope module, \"unterminated");
  EXPECT_TRUE(d.scopes.empty());
  EXPECT_TRUE(d.system_calls.empty());
  EXPECT_EQ(d.files.size(), 1u);
  EXPECT_TRUE(ParseVvp("").scopes.empty());
}

TEST(CandidateAuditTest, SystemCalls) {
  for (const char* ok : {"$display", "$write", "$strobe", "$monitor", "$time", "$clog2", "$signed", "$error",
                         "$sformatf", "$ivl_enum_method$next", "$ivl_string_method$len", "$bitstoreal"}) {
    EXPECT_TRUE(SystemCallAllowed(ok)) << ok;
  }
  for (const char* bad : {"$finish", "$stop", "$fatal", "$exit", "$random", "$urandom", "$urandom_range", "$dist_normal",
                          "$fopen", "$fdisplay", "$readmemh", "$writememb", "$dumpvars", "$system", "$deposit",
                          "$test$plusargs", "$ivl_other", "$displayx", ""}) {
    EXPECT_FALSE(SystemCallAllowed(bad)) << bad;
  }
}

TEST(CandidateAuditTest, NamesTheFirstConstructAndItsPlace) {
  VvpDesign d;
  EXPECT_EQ(AuditCandidate(d), "");
  d.system_calls.push_back({"$display", "TopModule.sv", 3, "TopModule"});
  EXPECT_EQ(AuditCandidate(d), "");
  d.unit_variables.push_back({"leak", "", 0, "$unit"});
  EXPECT_EQ(AuditCandidate(d), "'leak' is declared outside any module, where the testbench can see it");
  d.switch_islands.push_back({"I0x1 .island tran;", "", 0, "sub"});
  EXPECT_EQ(AuditCandidate(d), "in sub: a bidirectional switch (tran, rtran, tranif0/1, rtranif0/1) can drive its input ports");
  d.forces.push_back({"%force/vec4", "", 0, "TopModule"});
  EXPECT_EQ(AuditCandidate(d), "in TopModule: force/release overrides nets the module shares with the testbench");
  d.system_calls.push_back({"$random", "TopModule.sv", 7, "TopModule"});
  EXPECT_EQ(AuditCandidate(d), "TopModule.sv:7: $random draws from the random sequence the testbench's stimulus uses");
  d.system_calls.insert(d.system_calls.begin(), {"$stop", "TopModule.sv", 2, "TopModule"});
  EXPECT_EQ(AuditCandidate(d), "TopModule.sv:2: $stop ends the simulation");
  d.system_calls.front() = {"$fwrite", "TopModule.sv", 2, "TopModule"};
  EXPECT_EQ(AuditCandidate(d), "TopModule.sv:2: $fwrite touches files");
  d.system_calls.front() = {"$deposit", "", 0, "sub"};
  EXPECT_EQ(AuditCandidate(d), "in sub: $deposit is not a system task or function a design may call");
}

}  // namespace
}  // namespace gk::eval
