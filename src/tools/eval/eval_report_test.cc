#include "tools/eval/eval_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/markdown_test_util.h"
#include "tools/plot/svg_testing.h"

namespace gk::eval {
namespace {

using gk::testing::Lines;
using gk::testing::RowOf;

using nlohmann::json;
using nlohmann::ordered_json;
using plot::svgtest::Count;
using plot::svgtest::WellFormed;

SampleRecord Rec(const std::string& problem, int sample, const std::string& category) {
  return {problem, sample, category == "pass", category, "module TopModule; endmodule", ""};
}

// Three problems with different n, out of order:
//   Prob001_zero       5/5  (all pass)
//   Prob002_m2014_q4i  1/3
//   Prob003_step_one   0/4  (none pass)
std::vector<SampleRecord> ThreeProblems() {
  return {Rec("Prob003_step_one", 0, "compile_error"),
          Rec("Prob001_zero", 0, "pass"),
          Rec("Prob002_m2014_q4i", 0, "mismatch"),
          Rec("Prob001_zero", 1, "pass"),
          Rec("Prob003_step_one", 1, "run_timeout"),
          Rec("Prob002_m2014_q4i", 1, "pass"),
          Rec("Prob001_zero", 2, "pass"),
          Rec("Prob003_step_one", 2, "compile_error"),
          Rec("Prob002_m2014_q4i", 2, "compile_error"),
          Rec("Prob001_zero", 3, "pass"),
          Rec("Prob003_step_one", 3, "mismatch"),
          Rec("Prob001_zero", 4, "pass")};
}

// The same problems in a second run, plus one the first run does not have:
//   Prob001 5/5, Prob002 3/3, Prob003 1/4, Prob004_vector2 0/3.
std::vector<SampleRecord> SecondRun() {
  std::vector<SampleRecord> r;
  for (int i = 0; i < 5; ++i) r.push_back(Rec("Prob001_zero", i, "pass"));
  for (int i = 0; i < 3; ++i) r.push_back(Rec("Prob002_m2014_q4i", i, "pass"));
  for (int i = 0; i < 4; ++i) r.push_back(Rec("Prob003_step_one", i, i == 0 ? "pass" : "mismatch"));
  for (int i = 0; i < 3; ++i) r.push_back(Rec("Prob004_vector2", i, "compile_error"));
  return r;
}

TEST(SummarizeTest, PerProblemCountsSortedByName) {
  const EvalSummary s = Summarize(ThreeProblems(), {1});
  ASSERT_EQ(s.problems.size(), 3u);
  EXPECT_EQ(s.problems[0].problem, "Prob001_zero");
  EXPECT_EQ(s.problems[0].n, 5);
  EXPECT_EQ(s.problems[0].c, 5);
  EXPECT_DOUBLE_EQ(s.problems[0].rate, 1.0);
  EXPECT_EQ(s.problems[1].problem, "Prob002_m2014_q4i");
  EXPECT_EQ(s.problems[1].n, 3);
  EXPECT_EQ(s.problems[1].c, 1);
  EXPECT_DOUBLE_EQ(s.problems[1].rate, 1.0 / 3);
  EXPECT_EQ(s.problems[2].problem, "Prob003_step_one");
  EXPECT_EQ(s.problems[2].n, 4);
  EXPECT_EQ(s.problems[2].c, 0);
  EXPECT_EQ(s.samples, 12);
  EXPECT_EQ(s.problems_all_pass, 1);
  EXPECT_EQ(s.problems_none_pass, 1);
  EXPECT_EQ(s.categories,
            (std::map<std::string, int>{{"compile_error", 3}, {"mismatch", 2}, {"pass", 6}, {"run_timeout", 1}}));
}

TEST(SummarizeTest, PassAtKIsTheMeanOfPerProblemEstimatesForKUpToTheSmallestN) {
  // Asked 5, 3, 2, 1 (twice), 0, -1; the smallest n is 3, so 5 is dropped (and 0, -1 are not k's).
  const EvalSummary s = Summarize(ThreeProblems(), {5, 3, 2, 1, 1, 0, -1});
  ASSERT_EQ(s.pass_at_k.size(), 3u);
  EXPECT_EQ(s.pass_at_k[0].first, 1);
  EXPECT_DOUBLE_EQ(s.pass_at_k[0].second, (1 + 1.0 / 3 + 0) / 3);  // the pass rates' mean
  EXPECT_EQ(s.pass_at_k[1].first, 2);
  EXPECT_DOUBLE_EQ(s.pass_at_k[1].second, (1 + (1 - 1.0 / 3) + 0) / 3);  // Prob002: 1 - C(2,2)/C(3,2)
  EXPECT_EQ(s.pass_at_k[2].first, 3);
  EXPECT_DOUBLE_EQ(s.pass_at_k[2].second, (1 + 1 + 0) / 3.0);  // Prob002: n - c = 2 < 3, so 1

  EXPECT_TRUE(Summarize(ThreeProblems(), {4, 5}).pass_at_k.empty());
}

TEST(SummarizeTest, NoRecords) {
  const EvalSummary s = Summarize({}, {1, 5});
  EXPECT_TRUE(s.problems.empty());
  EXPECT_TRUE(s.pass_at_k.empty());
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(FormatEvalSummary(s), "verilog-eval: no samples\n");
  for (const auto& [name, svg] : EvalPlots(s)) {
    EXPECT_TRUE(WellFormed(svg)) << name;
    EXPECT_NE(svg.find(">no data</text>"), std::string::npos) << name;
  }
}

TEST(SummaryJsonTest, KeysInOrderThenMetadata) {
  const EvalSummary s = Summarize(ThreeProblems(), {1, 5});
  ordered_json meta = {{"model", "gemma-3-1b"},
                       {"iverilog", "Icarus Verilog version 11.0 (stable) ()"},
                       {"samples", 99}};  // a setting named like a result: the result wins
  const ordered_json j = SummaryJson(s, meta);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"pass_at_k", "problems_all_pass", "problems_none_pass", "problem_count",
                                            "samples", "categories", "problems", "model", "iverilog"}));
  EXPECT_EQ(j["pass_at_k"].size(), 1u);  // k = 5 > the smallest n (3): not reported
  EXPECT_DOUBLE_EQ(j["pass_at_k"]["1"].get<double>(), 4.0 / 9);
  EXPECT_EQ(j["problems_all_pass"], 1);
  EXPECT_EQ(j["problems_none_pass"], 1);
  EXPECT_EQ(j["problem_count"], 3);
  EXPECT_EQ(j["samples"], 12);
  EXPECT_EQ(j["categories"]["pass"], 6);
  EXPECT_EQ(j["categories"]["run_timeout"], 1);
  ASSERT_EQ(j["problems"].size(), 3u);
  EXPECT_EQ(j["problems"][1].dump(), R"({"problem":"Prob002_m2014_q4i","n":3,"c":1,"rate":0.3333333333333333})");
  EXPECT_EQ(j["model"], "gemma-3-1b");

  EXPECT_EQ(SummaryJson(s, nullptr).size(), 7u);                                   // no metadata
  EXPECT_TRUE(SummaryJson(Summarize({}, {1}), nullptr)["pass_at_k"].is_object());  // {} even when empty
}

TEST(FormatEvalSummaryTest, ConsoleBlock) {
  EXPECT_EQ(FormatEvalSummary(Summarize(ThreeProblems(), {1, 2, 5})),
            "verilog-eval: 3 problems, 12 samples (n = 3..5)\n"
            "  pass@1: 0.4444\n"
            "  pass@2: 0.5556\n"
            "  problems at 100 %: 1 of 3 (33.3 %)\n"
            "  problems at 0 %:   1 of 3 (33.3 %)\n"
            "  samples by outcome:\n"
            "    pass               6   50.0 %\n"
            "    compile_error      3   25.0 %\n"
            "    mismatch           2   16.7 %\n"
            "    run_timeout        1    8.3 %\n");
  const std::string only_big_k = FormatEvalSummary(Summarize(ThreeProblems(), {5}));
  EXPECT_NE(only_big_k.find("  pass@k: none reported (k must be between 1 and the smallest n, 3)\n"),
            std::string::npos);
}

TEST(EvalPlotsTest, PassRateBarsAndDistributionWithMixedN) {
  const auto plots = EvalPlots(Summarize(ThreeProblems(), {1}));
  ASSERT_EQ(plots.size(), 2u);
  EXPECT_EQ(plots[0].first, "pass_rate_per_problem.svg");
  EXPECT_EQ(plots[1].first, "score_distribution.svg");
  const std::string& rates = plots[0].second;
  EXPECT_TRUE(WellFormed(rates));
  EXPECT_EQ(Count(rates, "<title>"), 3u);
  EXPECT_NE(rates.find("<title>Prob002_m2014_q4i: 1 of 3 pass (33 %)</title>"), std::string::npos);
  EXPECT_NE(rates.find("Pass rate per problem (3 problems, n = 3..5)"), std::string::npos);
  EXPECT_NE(rates.find(">100</text>"), std::string::npos);  // the y axis is fixed at 0..100 %
  // Mixed n: one bucket per distinct pass rate, in order.
  const std::string& dist = plots[1].second;
  EXPECT_TRUE(WellFormed(dist));
  EXPECT_EQ(Count(dist, "<title>"), 3u);
  const size_t p0 = dist.find(">0 %</text>"), p33 = dist.find(">33 %</text>"), p100 = dist.find(">100 %</text>");
  ASSERT_NE(p0, std::string::npos);
  ASSERT_NE(p33, std::string::npos);
  ASSERT_NE(p100, std::string::npos);
  EXPECT_LT(p0, p33);
  EXPECT_LT(p33, p100);
  EXPECT_NE(dist.find("<title>1 problem passing 1/3 (33.3 %)</title>"), std::string::npos);
}

TEST(EvalPlotsTest, DistributionWithOneNHasEveryBucket) {
  std::vector<SampleRecord> r;
  for (int i = 0; i < 5; ++i) r.push_back(Rec("Prob001_zero", i, "pass"));
  for (int i = 0; i < 5; ++i) r.push_back(Rec("Prob002_m2014_q4i", i, i < 2 ? "pass" : "mismatch"));
  for (int i = 0; i < 5; ++i) r.push_back(Rec("Prob003_step_one", i, i < 2 ? "pass" : "mismatch"));
  const std::string dist = EvalPlots(Summarize(r, {1, 5}))[1].second;
  EXPECT_TRUE(WellFormed(dist));
  EXPECT_EQ(Count(dist, "<title>"), 6u);  // 0/5 .. 5/5, empty buckets included
  EXPECT_NE(dist.find("<title>0 problems with 0 of 5 passing</title>"), std::string::npos);
  EXPECT_NE(dist.find("<title>2 problems with 2 of 5 passing</title>"), std::string::npos);
  EXPECT_NE(dist.find("<title>1 problem with 5 of 5 passing</title>"), std::string::npos);
  EXPECT_NE(dist.find(">passing samples out of 5</text>"), std::string::npos);
  EXPECT_NE(dist.find(">5/5</text>"), std::string::npos);
}

TEST(EvalPlotsTest, PaperSizedRunStaysReadable) {
  std::vector<SampleRecord> r;
  for (int p = 1; p <= 156; ++p) {
    const std::string name = "Prob" + std::string(p < 10 ? "00" : p < 100 ? "0" : "") + std::to_string(p) + "_x";
    for (int i = 0; i < 5; ++i) r.push_back(Rec(name, i, i < p % 6 ? "pass" : "mismatch"));
  }
  const auto plots = EvalPlots(Summarize(r, {1, 5}));
  EXPECT_TRUE(WellFormed(plots[0].second));
  EXPECT_EQ(Count(plots[0].second, "<title>"), 156u);
  EXPECT_NE(plots[0].second.find("width=\"1344\""), std::string::npos);  // 8 px a bar
  EXPECT_NE(plots[0].second.find("rotate(-90 "), std::string::npos);
}

// ---- compare ----

json RoundTrip(const ordered_json& j) { return json::parse(j.dump(2)); }  // as read back from summary.json

TEST(CompareEvalMarkdownTest, RowsDeltasSettingsAndDifferingProblems) {
  const json a = RoundTrip(SummaryJson(Summarize(ThreeProblems(), {1, 2, 3}),
                                       {{"model", "gemma-tpu"}, {"iverilog", "11.0"}, {"temperature", 0.8}}));
  const json b = RoundTrip(
      SummaryJson(Summarize(SecondRun(), {1, 2}), {{"model", "gemma|gpu"}, {"iverilog", "11.0"}, {"top_p", 0.95}}));
  Result<std::string> md = CompareEvalMarkdown(a, b, "TPU", "GPU");
  ASSERT_TRUE(md.ok()) << md.message();
  const std::vector<std::string> lines = Lines(*md);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0], "## TPU vs GPU: verilog-eval");
  EXPECT_EQ(lines[2], "| metric | TPU | GPU | GPU - TPU |");
  EXPECT_EQ(lines[3], "|---|---:|---:|---:|");
  // GPU: pass@1 = (1 + 1 + 1/4 + 0) / 4, pass@2 = (1 + 1 + 1/2 + 0) / 4.
  EXPECT_EQ(RowOf(*md, "pass@1"), "| pass@1 | 0.4444 | 0.5625 | +0.1181 |");
  EXPECT_EQ(RowOf(*md, "pass@2"), "| pass@2 | 0.5556 | 0.6250 | +0.0694 |");
  EXPECT_EQ(RowOf(*md, "pass@3"), "| pass@3 | 0.6667 | - | - |");  // only TPU asked for it
  EXPECT_EQ(RowOf(*md, "problems at 100 %"), "| problems at 100 % | 1 | 2 | +1 |");
  EXPECT_EQ(RowOf(*md, "problems at 0 %"), "| problems at 0 % | 1 | 1 | = |");
  EXPECT_EQ(RowOf(*md, "problems"), "| problems | 3 | 4 | +1 |");
  EXPECT_EQ(RowOf(*md, "samples"), "| samples | 12 | 15 | +3 |");
  EXPECT_NE(md->find("### run settings\n\n| setting | TPU | GPU |\n|---|---|---|\n"), std::string::npos);
  EXPECT_EQ(RowOf(*md, "model"), "| model | gemma-tpu | gemma\\|gpu |");
  EXPECT_EQ(RowOf(*md, "temperature"), "| temperature | 0.8 | - |");
  EXPECT_EQ(RowOf(*md, "top_p"), "| top_p | - | 0.95 |");
  EXPECT_NE(md->find("### problems where the runs differ most\n\n2 problems differ:\n\n"
                     "| problem | TPU | GPU | GPU - TPU |\n|---|---:|---:|---:|\n"
                     "| Prob002_m2014_q4i | 1/3 | 3/3 | +67 pp |\n"
                     "| Prob003_step_one | 0/4 | 1/4 | +25 pp |\n"),
            std::string::npos)
      << *md;
  EXPECT_EQ(RowOf(*md, "Prob001_zero"), "");  // the same in both
  EXPECT_EQ(lines.back(), "Only in GPU: 1 problem (Prob004_vector2)");
  EXPECT_EQ(md->find("Only in TPU"), std::string::npos);
}

TEST(CompareEvalMarkdownTest, IdenticalRunsAndManyDifferences) {
  const json a = RoundTrip(SummaryJson(Summarize(ThreeProblems(), {1}), nullptr));
  Result<std::string> md = CompareEvalMarkdown(a, a, "A|x", "B");
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(Lines(*md)[0], "## A\\|x vs B: verilog-eval");
  EXPECT_EQ(RowOf(*md, "pass@1"), "| pass@1 | 0.4444 | 0.4444 | = |");
  EXPECT_NE(md->find("Every problem in both runs has the same pass rate in each.\n"), std::string::npos);
  EXPECT_EQ(md->find("run settings"), std::string::npos);

  std::vector<SampleRecord> ra, rb;
  for (int p = 0; p < 25; ++p) {
    const std::string name = "Prob" + std::to_string(100 + p);
    for (int i = 0; i < 4; ++i) ra.push_back(Rec(name, i, "mismatch"));
    for (int i = 0; i < 4; ++i) rb.push_back(Rec(name, i, i <= p % 4 ? "pass" : "mismatch"));
  }
  md = CompareEvalMarkdown(RoundTrip(SummaryJson(Summarize(ra, {1}), nullptr)),
                           RoundTrip(SummaryJson(Summarize(rb, {1}), nullptr)), "A", "B");
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_NE(md->find("25 problems differ; the 20 that differ most:\n"), std::string::npos);
  EXPECT_EQ(RowOf(*md, "Prob103"), "| Prob103 | 0/4 | 4/4 | +100 pp |");  // the biggest first
  EXPECT_EQ(Lines(*md)[Lines(*md).size() - 20], "| Prob103 | 0/4 | 4/4 | +100 pp |");
  EXPECT_EQ(Lines(*md).back(), "| Prob104 | 0/4 | 1/4 | +25 pp |");  // then by name: Prob108 .. 124 left out
}

TEST(CompareEvalMarkdownTest, ErrorsNameTheRunAndTheField) {
  const json good = RoundTrip(SummaryJson(Summarize(ThreeProblems(), {1}), nullptr));
  auto message = [&](const json& b) {
    Result<std::string> md = CompareEvalMarkdown(good, b, "A", "B");
    return md.ok() ? std::string("ok") : md.message();
  };
  EXPECT_EQ(message(good), "ok");
  EXPECT_EQ(message(json::array()),
            "summary \"B\": is not a JSON object (expected the summary.json of `gemmakit eval verilog`)");
  EXPECT_EQ(message(json{{"model", "x"}}),
            "summary \"B\": \"pass_at_k\" is missing or not an object (expected the summary.json of `gemmakit eval "
            "verilog`)");
  json bad = good;
  bad["pass_at_k"]["one"] = 0.5;
  EXPECT_EQ(message(bad), "summary \"B\": \"pass_at_k\" key \"one\" is not a positive integer k");
  bad = good;
  bad["pass_at_k"]["1"] = "high";
  EXPECT_EQ(message(bad), "summary \"B\": \"pass_at_k\".\"1\" is \"high\", not a number");
  bad = good;
  bad.erase("problems_none_pass");
  EXPECT_EQ(message(bad), "summary \"B\": \"problems_none_pass\" is missing or not an integer");
  bad = good;
  bad["problems"][1]["c"] = 7;
  EXPECT_EQ(message(bad),
            "summary \"B\": \"problems\"[1] needs \"problem\" (a string), \"n\" (an integer >= 1) and \"c\" (an "
            "integer in 0..n), got {\"c\":7,\"n\":3,\"problem\":\"Prob002_m2014_q4i\",\"rate\":0.3333333333333333}");
  bad = good;
  bad["problems"][1]["problem"] = "Prob001_zero";
  EXPECT_EQ(message(bad), "summary \"B\": problem \"Prob001_zero\" is listed twice");
  EXPECT_EQ(CompareEvalMarkdown(json(nullptr), good, "A", "B").message(),
            "summary \"A\": is not a JSON object (expected the summary.json of `gemmakit eval verilog`)");
  for (const json& b : {json::array(), json{{"model", "x"}}, bad})
    EXPECT_EQ(message(b).find('\n'), std::string::npos);  // one line each
}

}  // namespace
}  // namespace gk::eval
