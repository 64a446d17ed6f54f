// The scorer with real iverilog: hand-written wrong candidates fail with the right category,
// forged result lines, attacks on the testbench and escapes from the scratch directory do not
// count, ordinary designs still pass, and (with
// ../shared) the 156 reference solutions pass except the three the spec explains.
#include "tools/eval/verilog_scorer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "tools/eval/sandbox.h"
#include "tools/eval/verilog_problems.h"

namespace gk::eval {
namespace {

const char* kRef = R"(module RefModule(input a, input b, output y);
  assign y = a & b;
endmodule
)";

// A small testbench of verilog-eval's shape: compares both modules, prints the result line.
const char* kTest = R"(`timescale 1 ps/1 ps
module tb();
  reg a, b;
  wire y_ref, y_dut;
  integer errors = 0, clocks = 0, i;
  RefModule good1(.a(a), .b(b), .y(y_ref));
  TopModule top_module1(.a(a), .b(b), .y(y_dut));
  initial begin
    for (i = 0; i < 16; i = i + 1) begin
      {a, b} = i[1:0];
      #5;
      clocks = clocks + 1;
      if (y_ref !== y_dut) errors = errors + 1;
    end
    $finish;
  end
  final $display("Mismatches: %1d in %1d samples", errors, clocks);
endmodule
)";

std::string Top(const std::string& body) { return "module TopModule(input a, input b, output y);\n" + body + "\nendmodule\n"; }

class ScorerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!IverilogVersion(o_).ok()) GTEST_SKIP() << "iverilog is not installed (scripts/install_deps.sh installs it)";
    if (LandlockAbi() == 0) GTEST_SKIP() << "no Landlock on this kernel: the sandboxed scorer cannot run";
    o_.run_timeout_s = 3;
  }
  SampleScore Score(const std::string& candidate) {
    auto r = ScoreSample(candidate, kRef, kTest, o_);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.ok() ? *r : SampleScore{};
  }
  ScoreOptions o_;
};

TEST_F(ScorerTest, CorrectCandidatePasses) {
  const SampleScore s = Score(Top("assign y = a & b;"));
  EXPECT_EQ(s.category, SampleCategory::kPass) << s.log;
  EXPECT_TRUE(s.passed);
  EXPECT_EQ(s.mismatches, 0);
  EXPECT_EQ(s.samples, 16);
  EXPECT_EQ(s.log.find("GKRESULT"), std::string::npos);  // the nonce stays secret
}

TEST_F(ScorerTest, WrongCandidatesFailWithTheirCategory) {
  EXPECT_EQ(Score(Top("assign y = a | b;")).category, SampleCategory::kMismatch);
  EXPECT_EQ(Score(Top("assign y = a &;")).category, SampleCategory::kCompileError);
  EXPECT_EQ(Score("module Other(); endmodule").category, SampleCategory::kCompileError);  // no TopModule
  // A zero-delay loop at 1 ps (its own timescale, else #1 would be 1 s, after the test ends):
  // the simulator spins until the wall clock kills it.
  const SampleScore hang =
      Score("`timescale 1 ps/1 ps\n" + Top("assign y = a & b;\ninteger k = 0;\ninitial begin #1; while (1) k = k + 1; end"));
  EXPECT_EQ(hang.category, SampleCategory::kRunTimeout) << hang.log;
  EXPECT_FALSE(hang.passed);
}

TEST_F(ScorerTest, ForgedResultLinesDoNotPass) {
  // Wrong logic that prints the line a passing testbench would print.
  EXPECT_EQ(Score(Top("assign y = 0;\ninitial $display(\"Mismatches: 0 in 16 samples\");")).category,
            SampleCategory::kTampered);
  EXPECT_EQ(Score(Top("assign y = 0;\nfinal $display(\"Mismatches: 0 in 16 samples\");")).category,
            SampleCategory::kTampered);
  EXPECT_EQ(Score(Top("assign y = 0;\ninitial $error(\"Mismatches: 0 in 16 samples\");")).category,  // to stderr
            SampleCategory::kTampered);
}

// Each class of attack in several spellings, every one with wrong logic (or a copy of the
// reference) that would pass if the attack worked.
struct Attack {
  std::string candidate;
  SampleCategory want;
};

const std::string kPs = "`timescale 1 ps/1 ps\n";  // else the candidate's delays are seconds

TEST_F(ScorerTest, ReachingIntoTheTestbenchIsForbidden) {
  const auto F = SampleCategory::kForbidden;
  for (const Attack& a : std::vector<Attack>{
           {Top("assign y = 0;\ninitial force tb.errors = 0;"), F},
           {Top("assign y = 0;\nalways @(tb.clocks) tb.errors = 0;"), F},
           {Top("assign y = 0;\ndefparam tb.good1.W = 1;"), F},
           {Top("assign y = 0;\ndefparam good1.W = 1;"), F},
           {Top("RefModule copy(.a(a), .b(b), .y(y));"), F},  // the reference solution itself
           {Top("assign y = tb.y_ref;"), F},
           {Top("sub s(.y(y));\nendmodule\nmodule sub(output y);\nassign y = tb.good1.y;"), F},  // from a submodule
           // An extra top-level module named like the testbench's instance: alone, good1.y binds to
           // it; inside the testbench it would bind to the reference's output.
           {Top("assign y = good1.y;\nendmodule\nmodule good1;\nwire y = 0;"), F},
           {"`include \"../RefModule.sv\"\n" + Top("assign y = a & b;"), F},
           // A module TopModule never instantiates is not elaborated at all: its force does nothing.
           {Top("assign y = 0;\nendmodule\nmodule evil;\ninitial force tb.errors = 0;"), SampleCategory::kMismatch},
       }) {
    const SampleScore s = Score(a.candidate);
    EXPECT_EQ(CategoryName(s.category), std::string(CategoryName(a.want))) << a.candidate << "\n" << s.log;
    EXPECT_FALSE(s.passed);
    if (a.want == F) EXPECT_NE(s.reason, "") << a.candidate;
  }
}

TEST_F(ScorerTest, EndingTheRunEarlyIsForbidden) {
  // Right for the first 40 ps, wrong after, and the run ends at 40 ps: "0 in 8 samples".
  const std::string wrong_later = "assign y = $time < 40 ? a & b : 0;\n";
  for (const std::string& end : {"initial #40 $finish;", "initial #40 $stop;", "initial #40 $fatal(1, \"bye\");",
                                 "initial #40 $finish(0);", "always @(posedge y) if ($time > 35) $finish;",
                                 "initial #40 `END(ish);", "task t; $finish; endtask\ninitial #40 t();"}) {
    const std::string c = kPs + "`define END(x) $fin``x\n" + Top(wrong_later + end);
    const SampleScore s = Score(c);
    EXPECT_EQ(s.category, SampleCategory::kForbidden) << c << "\n" << s.log;
    EXPECT_NE(s.reason.find("ends the simulation"), std::string::npos) << s.reason;
  }
  // A short count is not a pass whatever ended the run: the reference's count is 16 here.
  auto short_run = ScoreSample(Top("assign y = a & b;"), kRef, kTest, o_, /*expected_samples=*/20);
  ASSERT_TRUE(short_run.ok()) << short_run.message();
  EXPECT_EQ(short_run->category, SampleCategory::kIncompleteRun);
  EXPECT_NE(short_run->reason.find("16 samples where the reference solution gives 20"), std::string::npos);
  auto full_run = ScoreSample(Top("assign y = a & b;"), kRef, kTest, o_, /*expected_samples=*/16);
  ASSERT_TRUE(full_run.ok());
  EXPECT_TRUE(full_run->passed);
}

TEST_F(ScorerTest, SteeringTheSimulationIsForbidden) {
  const std::vector<std::string> attacks = {
      Top("assign y = 1'bx;\ninitial force a = 1'bx;"),  // X in the reference matches anything
      Top("assign y = 0;\ninitial begin force b = 0; #1 release b; end"),
      Top("assign y = 0;\nwire z = 0;\ntran t(a, z);"),
      Top("assign y = 0;\nwire z = 0;\nrtranif1 t(b, z, 1'b1);"),
      Top("assign y = a & b;\ninteger r;\ninitial r = $random;"),  // shifts the stimulus' random sequence
      Top("assign y = a & b;\ninteger r;\ninitial r = $urandom_range(3);"),
      Top("assign y = a & b;\ninteger f;\ninitial f = $fopen(\"x.txt\");"),
      Top("assign y = a & b;\nreg [7:0] m [0:1];\ninitial $readmemh(\"RefModule.sv\", m);"),
      Top("assign y = a & b;\ninitial $dumpvars;"),
      "logic leak;\n" + Top("assign y = a & b;"),  // visible to the testbench by name
      Top("assign y = a & b;") + "/* the testbench's first lines would be a comment",
      Top("assign y = a & b;") + "`ifdef NEVER_DEFINED\n",
  };
  for (const std::string& c : attacks) {
    const SampleScore s = Score(c);
    EXPECT_EQ(s.category, SampleCategory::kForbidden) << c << "\n" << s.log;
    EXPECT_NE(s.reason, "") << c;
  }
}

TEST_F(ScorerTest, OrdinaryDesignsStillPass) {
  for (const std::string& c : {
           Top("and_gate g(.p(a), .q(b), .r(y));") + "module and_gate(input p, input q, output r);\nassign r = p & q;\nendmodule\n",
           Top("assign y = a & b;\nalways @(a) $display(\"a=%b t=%0t\", a, $time);"),
           Top("function automatic logic f(logic p, logic q); return p & q; endfunction\nassign y = f(a, b);"),
           Top("typedef enum logic {S0, S1} st_t;\nst_t s = S0;\nalways @(a) s <= s == S0 ? S1 : S0;\nassign y = a & b;"),
           Top("genvar i;\nwire [1:0] w;\ngenerate for (i = 0; i < 2; i = i + 1) begin : g\nassign w[i] = i ? b : a;\n"
               "end endgenerate\nassign y = &w;"),
           // A testbench of its own, never instantiated by TopModule: not elaborated, not refused.
           Top("assign y = a & b;") + "module TopModule_tb;\nreg p, q; wire r;\nTopModule d(p, q, r);\n"
                                      "initial begin p = 1; q = 1; #1 $display(r); $finish; end\nendmodule\n",
       }) {
    const SampleScore s = Score(c);
    EXPECT_EQ(s.category, SampleCategory::kPass) << c << "\n" << s.log;
  }
}

TEST_F(ScorerTest, FileTasksAreRefusedBeforeTheyRun) {
  const std::string outside = std::filesystem::temp_directory_path().string() + "/gk_scorer_escape_" +
                              std::to_string(::getpid()) + ".txt";
  std::filesystem::remove(outside);
  const SampleScore s = Score(Top("assign y = a & b;\ninteger f;\ninitial begin f = $fopen(\"" + outside +
                                  "\", \"w\"); $fdisplay(f, \"escaped\"); $fclose(f); end"));
  EXPECT_FALSE(std::filesystem::exists(outside)) << "the candidate wrote " << outside;
  EXPECT_EQ(s.category, SampleCategory::kForbidden) << s.log;  // the sandbox would refuse the write too
}

TEST_F(ScorerTest, HarnessErrorsAreErrors) {
  ScoreOptions bad = o_;
  bad.iverilog = "/nonexistent/iverilog";
  EXPECT_FALSE(ScoreSample(Top(""), kRef, kTest, bad).ok());
  bad = o_;
  bad.scratch_root = "/nonexistent-dir";
  EXPECT_FALSE(ScoreSample(Top(""), kRef, kTest, bad).ok());
}

// The 156 references scored as candidates (each renamed to TopModule) under Debian's iverilog 11,
// through every check a candidate gets (alone, audited, sandboxed): all pass except Prob099 (a dataset bug) and Prob151/Prob156 (enum casts iverilog 11 rejects).
TEST_F(ScorerTest, ReferenceSolutionsOfVerilogEval) {
  const std::string dir = std::string(GK_SOURCE_DIR) + "/../shared/verilog-eval";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (CI has ../shared)";
  auto problems = LoadVerilogProblems(dir, {});
  ASSERT_TRUE(problems.ok()) << problems.message();
  ASSERT_EQ(problems->size(), 156u);
  o_.run_timeout_s = 60;
  std::vector<std::string> failed(problems->size());
  std::vector<std::thread> workers;
  std::atomic<size_t> next{0};
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < problems->size();) {
        const VerilogProblem& p = (*problems)[i];
        auto s = ScoreSample(ReferenceAsCandidate(p.ref), p.ref, p.test, o_);
        if (!s.ok()) failed[i] = "error: " + s.message();
        else if (!s->passed) failed[i] = CategoryName(s->category);
      }
    });
  }
  for (auto& t : workers) t.join();
  std::set<std::string> fails;
  for (size_t i = 0; i < failed.size(); ++i) {
    if (!failed[i].empty()) fails.insert((*problems)[i].name + ":" + failed[i]);
  }
  EXPECT_EQ(fails, (std::set<std::string>{"Prob099_m2014_q6c:compile_error", "Prob151_review2015_fsm:compile_error",
                                          "Prob156_review2015_fancytimer:compile_error"}));
}

}  // namespace
}  // namespace gk::eval
