// The scorer with real iverilog: hand-written wrong candidates fail with the right category,
// forged result lines and escapes from the scratch directory do not count, and (with
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
  // An early $finish: the testbench reports 0 mismatches in 0 samples, which is not a pass.
  const SampleScore early = Score(Top("assign y = a & b;\ninitial $finish;"));
  EXPECT_EQ(early.category, SampleCategory::kMismatch);
  EXPECT_EQ(early.samples, 0);
}

TEST_F(ScorerTest, ForgedResultLinesDoNotPass) {
  // Wrong logic that prints the line a passing testbench would print.
  EXPECT_EQ(Score(Top("assign y = 0;\ninitial $display(\"Mismatches: 0 in 16 samples\");")).category,
            SampleCategory::kTampered);
  EXPECT_EQ(Score(Top("assign y = 0;\nfinal $display(\"Mismatches: 0 in 16 samples\");")).category,
            SampleCategory::kTampered);
  EXPECT_EQ(Score(Top("assign y = 0;\ninitial $fdisplay(32'h8000_0002, \"Mismatches: 0 in 16 samples\");")).category,
            SampleCategory::kTampered);
}

TEST_F(ScorerTest, CannotWriteOutsideItsScratchDirectory) {
  const std::string outside = std::filesystem::temp_directory_path().string() + "/gk_scorer_escape_" +
                              std::to_string(::getpid()) + ".txt";
  std::filesystem::remove(outside);
  const SampleScore s = Score(Top("assign y = a & b;\ninteger f;\ninitial begin f = $fopen(\"" + outside +
                                  "\", \"w\"); $fdisplay(f, \"escaped\"); $fclose(f); end"));
  EXPECT_FALSE(std::filesystem::exists(outside)) << "the candidate wrote " << outside;
  EXPECT_EQ(s.category, SampleCategory::kPass) << s.log;  // the logic is right; only the write was refused
}

TEST_F(ScorerTest, HarnessErrorsAreErrors) {
  ScoreOptions bad = o_;
  bad.iverilog = "/nonexistent/iverilog";
  EXPECT_FALSE(ScoreSample(Top(""), kRef, kTest, bad).ok());
  bad = o_;
  bad.scratch_root = "/nonexistent-dir";
  EXPECT_FALSE(ScoreSample(Top(""), kRef, kTest, bad).ok());
}

// The 156 references scored as candidates (each renamed to TopModule) under Debian's iverilog 11:
// all pass except Prob099 (a dataset bug) and Prob151/Prob156 (enum casts iverilog 11 rejects).
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
        std::string cand = p.ref;
        cand.replace(cand.find("module RefModule"), 16, "module TopModule");
        auto s = ScoreSample(cand, p.ref, p.test, o_);
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
