#include "tools/bench_serve/compare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "tools/markdown_test_util.h"
#include "tools/plot/svg_testing.h"
#include "util/test_temp_dir.h"

namespace gk::bench {
namespace {

using gk::testing::Lines;
using gk::testing::RowOf;

using nlohmann::json;
using plot::svgtest::Count;
using plot::svgtest::WellFormed;

json Point(double rate, double out_tput, double ttft, double tpot) {
  json j = {{"request_rate", rate},
            {"completed", 100},
            {"failed", 0},
            {"duration", 30.5},
            {"request_throughput", 3.28},
            {"output_throughput", out_tput},
            {"total_token_throughput", out_tput * 2},
            {"max_output_tokens_per_s", out_tput * 1.5},
            {"max_concurrent_requests", 12},
            {"mean_ttft_ms", ttft},
            {"median_ttft_ms", ttft},
            {"median_tpot_ms", tpot},
            {"request_goodput", nullptr}};
  return j;
}

json SweepPointAt(int input_len, json rate, double out_tput, double ttft) {
  return {{"input_len", input_len},        {"output_len", 128},      {"request_rate", rate},
          {"output_throughput", out_tput}, {"median_ttft_ms", ttft}, {"median_tpot_ms", ttft / 10},
          {"p99_itl_ms", ttft / 5}};
}

json SweepDoc(json points, json summary) {
  return {{"gemmakit_sweep", 1}, {"points", std::move(points)}, {"summary", std::move(summary)}};
}

json Summary(int input_len, json saturation, double best, double peak) {
  return {{"input_len", input_len},
          {"saturation_request_rate", std::move(saturation)},
          {"best_output_throughput", best},
          {"best_output_throughput_request_rate", 8},
          {"peak_output_tokens_per_s", peak}};
}

// Two sweeps: TPU saturates at 8 req/s, GPU never does; both have 1024-token points at 2, 4 and
// inf, TPU also at 1 and at input length 2048.
std::vector<CompareInput> TwoSweeps(json gpu_saturation = nullptr) {
  json tpu = SweepDoc({SweepPointAt(1024, 1, 200, 50), SweepPointAt(1024, 2, 390, 55), SweepPointAt(1024, 4, 700, 60),
                       SweepPointAt(1024, "inf", 763, 900), SweepPointAt(2048, 1, 150, 80)},
                      {Summary(1024, 8, 763, 1100), Summary(2048, 4, 150, 300)});
  json gpu =
      SweepDoc({SweepPointAt(1024, 2, 380, 110), SweepPointAt(1024, 4, 474, 120), SweepPointAt(1024, "inf", 474, 2000)},
               {Summary(1024, gpu_saturation, 474, 520)});
  return {{"TPU", tpu}, {"GPU", gpu}};
}

TEST(CompareMarkdownTest, PointResultsWinnerAndRatio) {
  json tpu = Point(4, 763, 120, 30), gpu = Point(4, 474, 60, 30);
  tpu["p99_ttft_ms"] = 300;  // only in one input: no row
  gpu["failed"] = 2, gpu["completed"] = 98;
  Result<std::string> md = CompareMarkdown({{"TPU", tpu}, {"GPU", gpu}}, {});
  ASSERT_TRUE(md.ok()) << md.message();
  const std::vector<std::string> lines = Lines(*md);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0], "## TPU vs GPU: point results at request rate 4 req/s");
  EXPECT_EQ(lines[1], "");
  EXPECT_EQ(lines[2], "| metric | TPU | GPU | winner | ratio |");
  EXPECT_EQ(lines[3], "|---|---:|---:|---|---:|");
  EXPECT_EQ(RowOf(*md, "output throughput (tok/s)"), "| output throughput (tok/s) | 763.00 | 474.00 | TPU | 1.61x |");
  EXPECT_EQ(RowOf(*md, "peak output throughput (tok/s)"),
            "| peak output throughput (tok/s) | 1144.50 | 711.00 | TPU | 1.61x |");
  EXPECT_EQ(RowOf(*md, "median TTFT (ms)"), "| median TTFT (ms) | 120.00 | 60.00 | GPU | 2.00x |");
  EXPECT_EQ(RowOf(*md, "median TPOT (ms)"), "| median TPOT (ms) | 30.00 | 30.00 | - | = |");
  EXPECT_EQ(RowOf(*md, "completed"), "| completed | 100 | 98 | TPU | 1.02x |");
  EXPECT_EQ(RowOf(*md, "failed"), "| failed | 0 | 2 | TPU | - |");
  EXPECT_EQ(RowOf(*md, "P99 TTFT (ms)"), "");
  EXPECT_EQ(RowOf(*md, "request goodput (req/s)"), "");  // null in both
  EXPECT_EQ(RowOf(*md, "median ITL (ms)"), "");          // in neither
}

TEST(CompareMarkdownTest, PointRowsInOrderAndCountsEqual) {
  const std::vector<CompareInput> in = {{"A", Point(4, 100, 10, 1)}, {"B", Point(4, 200, 20, 2)}};
  Result<std::string> md = CompareMarkdown(in, {});
  ASSERT_TRUE(md.ok()) << md.message();
  const std::vector<std::string> lines = Lines(*md);
  std::vector<std::string> metrics;
  for (size_t i = 4; i < lines.size(); ++i) metrics.push_back(lines[i].substr(2, lines[i].find(" |") - 2));
  EXPECT_EQ(metrics, (std::vector<std::string>{"output throughput (tok/s)", "peak output throughput (tok/s)",
                                               "total throughput (tok/s)", "request throughput (req/s)",
                                               "median TTFT (ms)", "median TPOT (ms)", "completed", "failed"}));
  EXPECT_EQ(RowOf(*md, "failed"), "| failed | 0 | 0 | - | = |");
  EXPECT_EQ(RowOf(*md, "request throughput (req/s)"), "| request throughput (req/s) | 3.28 | 3.28 | - | = |");
}

TEST(CompareMarkdownTest, GoodputRowWhenANumberEverywhere) {
  json a = Point(4, 100, 10, 1), b = Point(4, 100, 10, 1);
  a["request_goodput"] = 3.0, b["request_goodput"] = 1.5;
  Result<std::string> md = CompareMarkdown({{"A", a}, {"B", b}}, {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(RowOf(*md, "request goodput (req/s)"), "| request goodput (req/s) | 3.00 | 1.50 | A | 2.00x |");
}

TEST(CompareMarkdownTest, ThreeInputsBestVsWorst) {
  const std::vector<CompareInput> in = {
      {"A", Point(4, 400, 30, 5)}, {"B", Point(4, 800, 10, 5)}, {"C", Point(4, 200, 10, 5)}};
  Result<std::string> md = CompareMarkdown(in, {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_NE(md->find("| metric | A | B | C | winner | ratio |\n|---|---:|---:|---:|---|---:|\n"), std::string::npos);
  EXPECT_EQ(RowOf(*md, "output throughput (tok/s)"),
            "| output throughput (tok/s) | 400.00 | 800.00 | 200.00 | B | 4.00x |");
  EXPECT_EQ(RowOf(*md, "median TTFT (ms)"), "| median TTFT (ms) | 30.00 | 10.00 | 10.00 | B, C | 3.00x |");
  EXPECT_EQ(Lines(*md)[0], "## A vs B vs C: point results at request rate 4 req/s");
}

TEST(CompareMarkdownTest, ZeroLatencyMeansNoDataAndZeroThroughputLoses) {
  json a = Point(4, 0, 0, 0), b = Point(4, 474, 60, 30);
  Result<std::string> md = CompareMarkdown({{"A", a}, {"B", b}}, {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(RowOf(*md, "output throughput (tok/s)"), "| output throughput (tok/s) | 0.00 | 474.00 | B | - |");
  EXPECT_EQ(RowOf(*md, "median TTFT (ms)"), "| median TTFT (ms) | 0.00 | 60.00 | - | - |");
}

TEST(CompareMarkdownTest, DifferentRatesAndBurstInHeaderAndEscapedLabels) {
  json a = Point(4, 100, 10, 1), b = Point(4, 100, 10, 1);
  b["request_rate"] = "inf";
  Result<std::string> md = CompareMarkdown({{"A|x", a}, {"B", b}}, {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(Lines(*md)[0], "## A\\|x vs B: point results at request rates 4 req/s (A\\|x), inf (burst) (B)");
  EXPECT_EQ(Lines(*md)[2], "| metric | A\\|x | B | winner | ratio |");
}

TEST(CompareMarkdownTest, SweepSectionsSaturationAndLowestCommonRate) {
  Result<std::string> md = CompareMarkdown(TwoSweeps(), {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(*md,
            "## TPU vs GPU: sweep summaries, latencies at the lowest request rate every input has\n"
            "\n"
            "### input 1024 tokens\n"
            "\n"
            "| metric | TPU | GPU | winner | ratio |\n"
            "|---|---:|---:|---|---:|\n"
            "| best output throughput (tok/s) | 763.00 | 474.00 | TPU | 1.61x |\n"
            "| peak output throughput (tok/s) | 1100.00 | 520.00 | TPU | 2.12x |\n"
            "| saturation request rate (req/s) | 8.00 | not reached | GPU | - |\n"
            "| median TTFT @ 2 req/s (ms) | 55.00 | 110.00 | TPU | 2.00x |\n"
            "| median TPOT @ 2 req/s (ms) | 5.50 | 11.00 | TPU | 2.00x |\n"
            "| P99 ITL @ 2 req/s (ms) | 11.00 | 22.00 | TPU | 2.00x |\n");
}

TEST(CompareMarkdownTest, SweepSaturationNumbersAndBothNotReached) {
  Result<std::string> md = CompareMarkdown(TwoSweeps(4), {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(RowOf(*md, "saturation request rate (req/s)"),
            "| saturation request rate (req/s) | 8.00 | 4.00 | TPU | 2.00x |");

  std::vector<CompareInput> in = TwoSweeps();
  in[0].doc["summary"][0]["saturation_request_rate"] = nullptr;
  md = CompareMarkdown(in, {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(RowOf(*md, "saturation request rate (req/s)"),
            "| saturation request rate (req/s) | not reached | not reached | - | = |");
}

TEST(CompareMarkdownTest, SweepAtRate) {
  CompareOptions opt;
  opt.at_rate = 4;
  Result<std::string> md = CompareMarkdown(TwoSweeps(), opt);
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(Lines(*md)[0], "## TPU vs GPU: sweep summaries, latencies at 4 req/s");
  EXPECT_EQ(RowOf(*md, "median TTFT @ 4 req/s (ms)"), "| median TTFT @ 4 req/s (ms) | 60.00 | 120.00 | TPU | 2.00x |");
  EXPECT_EQ(RowOf(*md, "median TTFT @ 2 req/s (ms)"), "");

  opt.at_rate = std::numeric_limits<double>::infinity();
  md = CompareMarkdown(TwoSweeps(), opt);
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(RowOf(*md, "median TTFT @ inf (burst) (ms)"),
            "| median TTFT @ inf (burst) (ms) | 900.00 | 2000.00 | TPU | 2.22x |");

  opt.at_rate = 1;  // only TPU has it
  md = CompareMarkdown(TwoSweeps(), opt);
  ASSERT_FALSE(md.ok());
  EXPECT_EQ(md.message(),
            "request rate 1 req/s is not in every input for input length 1024 (TPU: 1, 2, 4, inf; GPU: 2, 4, inf)");
}

TEST(CompareMarkdownTest, SweepRowsMissingInOneInputAreLeftOut) {
  std::vector<CompareInput> in = TwoSweeps();
  in[1].doc["summary"][0].erase("peak_output_tokens_per_s");
  in[1].doc["points"][0].erase("p99_itl_ms");  // the 2 req/s point
  Result<std::string> md = CompareMarkdown(in, {});
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_EQ(RowOf(*md, "peak output throughput (tok/s)"), "");
  EXPECT_EQ(RowOf(*md, "P99 ITL @ 2 req/s (ms)"), "");
  EXPECT_NE(RowOf(*md, "best output throughput (tok/s)"), "");
}

TEST(CompareMarkdownTest, Errors) {
  auto message = [](const std::vector<CompareInput>& in) {
    Result<std::string> md = CompareMarkdown(in, {});
    return md.ok() ? std::string("ok") : md.message();
  };
  EXPECT_EQ(message({{"A", Point(4, 1, 1, 1)}}), "bench compare needs at least two inputs, got 1");
  EXPECT_EQ(message({{"A", Point(4, 1, 1, 1)}, TwoSweeps()[1]}),
            "inputs are of different kinds: input \"A\" is a point result, input \"GPU\" is a sweep summary; "
            "compare point results with point results and sweeps with sweeps");
  EXPECT_EQ(
      message({{"A", Point(4, 1, 1, 1)}, {"B", json{{"x", 1}}}}),
      "input \"B\" is neither a point result (no \"request_rate\") nor a sweep summary (no \"gemmakit_sweep\": 1)");
  EXPECT_EQ(message({{"A", Point(4, 1, 1, 1)}, {"B", json::array()}}), "input \"B\" is not a JSON object");
  json bad = Point(4, 1, 1, 1);
  bad["output_throughput"] = "fast";
  EXPECT_EQ(message({{"A", Point(4, 1, 1, 1)}, {"B", bad}}),
            "input \"B\": \"output_throughput\" is \"fast\", expected a number");
  bad = Point(4, 1, 1, 1);
  bad["request_rate"] = "soon";
  EXPECT_EQ(message({{"A", Point(4, 1, 1, 1)}, {"B", bad}}),
            "input \"B\": \"request_rate\" is \"soon\", expected a number or \"inf\"");

  std::vector<CompareInput> sweeps = TwoSweeps();
  sweeps[1].doc["points"] = {SweepPointAt(1024, 16, 1, 1)};
  EXPECT_EQ(message(sweeps), "no request rate is in every input for input length 1024 (TPU: 1, 2, 4, inf; GPU: 16)");
  sweeps = TwoSweeps();
  sweeps[1].doc["points"] = json::array();
  sweeps[1].doc["summary"] = {Summary(512, nullptr, 1, 1)};
  EXPECT_EQ(message(sweeps), "no input length is in every sweep (TPU: 1024 2048; GPU: 512)");
  sweeps = TwoSweeps();
  sweeps[0].doc["points"][1].erase("input_len");
  EXPECT_EQ(message(sweeps), "input \"TPU\": points[1].input_len is missing or not an integer");
  sweeps = TwoSweeps();
  sweeps[0].doc["gemmakit_sweep"] = 2;
  EXPECT_EQ(message(sweeps), "input \"TPU\" has \"gemmakit_sweep\": 2; only version 1 is known");
}

class LoadCompareInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTempDir("gk_compare_test");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(LoadCompareInputTest, LabelsWithStemOrGivenLabel) {
  const std::string path = Write("tpu_run.json", Point(4, 763, 1, 1).dump());
  Result<CompareInput> in = LoadCompareInput(path, "");
  ASSERT_TRUE(in.ok()) << in.message();
  EXPECT_EQ(in->label, "tpu_run");
  EXPECT_EQ(in->doc["output_throughput"], 763);
  in = LoadCompareInput(path, "TPU");
  ASSERT_TRUE(in.ok()) << in.message();
  EXPECT_EQ(in->label, "TPU");
}

TEST_F(LoadCompareInputTest, ErrorsNameTheFile) {
  const std::string not_json = Write("broken.json", "median_ttft_ms: 3\n");
  Result<CompareInput> in = LoadCompareInput(not_json, "");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.message().rfind(not_json + ": not valid JSON: parse error at line 1, column 1", 0), 0u) << in.message();
  EXPECT_EQ(in.message().find('\n'), std::string::npos);

  // A number too large for a double made nlohmann throw out_of_range (an abort before).
  const std::string huge = Write("huge.json", R"({"request_rate": 1e999})");
  in = LoadCompareInput(huge, "");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.message(), huge + ": not valid JSON: number overflow parsing '1e999'");

  const std::string other = Write("other.json", "{\"model\": \"x\"}");
  in = LoadCompareInput(other, "");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.message(), other +
                              " is neither a point result (no \"request_rate\") nor a sweep summary (no "
                              "\"gemmakit_sweep\": 1)");

  in = LoadCompareInput(dir_ + "/missing.json", "");
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.message().find(dir_ + "/missing.json"), std::string::npos) << in.message();
}

// ---- plots ----

TEST(ComparePlotsTest, PointResultsOnePairOfPlots) {
  json b = Point(4, 474, 60, 30);
  b["request_rate"] = "inf";
  Result<std::vector<std::pair<std::string, std::string>>> plots =
      ComparePlots({{"TPU <&>", Point(4, 763, 120, 30)}, {"GPU", b}});
  ASSERT_TRUE(plots.ok()) << plots.message();
  ASSERT_EQ(plots->size(), 2u);
  EXPECT_EQ((*plots)[0].first, "throughput_vs_rate.svg");
  EXPECT_EQ((*plots)[1].first, "ttft_vs_rate.svg");
  for (const auto& [name, svg] : *plots) {
    EXPECT_TRUE(WellFormed(svg)) << name;
    EXPECT_EQ(Count(svg, "<polyline"), 2u) << name;
    EXPECT_EQ(Count(svg, "<circle"), 2u) << name;
    EXPECT_NE(svg.find(">TPU &lt;&amp;&gt;</text>"), std::string::npos) << name;
    EXPECT_NE(svg.find(">GPU</text>"), std::string::npos) << name;
    EXPECT_NE(svg.find(">burst</text>"), std::string::npos) << name;
  }
}

TEST(ComparePlotsTest, SweepsOnePairPerInputLength) {
  Result<std::vector<std::pair<std::string, std::string>>> plots = ComparePlots(TwoSweeps());
  ASSERT_TRUE(plots.ok()) << plots.message();
  std::vector<std::string> names;
  for (const auto& [name, svg] : *plots) {
    names.push_back(name);
    EXPECT_TRUE(WellFormed(svg)) << name;
    EXPECT_EQ(Count(svg, "<polyline"), 2u) << name;
    EXPECT_NE(svg.find(">TPU</text>"), std::string::npos) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"throughput_vs_rate_in1024.svg", "ttft_vs_rate_in1024.svg",
                                             "throughput_vs_rate_in2048.svg", "ttft_vs_rate_in2048.svg"}));
  EXPECT_EQ(Count((*plots)[0].second, "<circle"), 7u);  // TPU 4 + GPU 3 points at 1024
  EXPECT_NE((*plots)[0].second.find("(input 1024 tokens)"), std::string::npos);

  EXPECT_FALSE(ComparePlots({TwoSweeps()[0]}).ok());
}

}  // namespace
}  // namespace gk::bench
