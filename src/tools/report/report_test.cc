// gemmakit report from synthetic artifacts: the reference case's numbers (FACTS.md §3-6) go in
// as training_run.json, summary.json, a sweep and vLLM point results; the tables must carry
// them, cost and TCO must follow from them, missing parts must say "not measured", and bad
// input must give one clear error.
#include "tools/report/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tools/markdown_test_util.h"
#include "tools/report/format.h"
#include "tools/report/projection.h"
#include "tools/cost/hardware_catalog.h"
#include <tuple>
#include "tools/plot/svg_testing.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::report {
namespace {

namespace fs = std::filesystem;
using gk::testing::RowOf;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A training run as `gemmakit train` writes it: 1,244 steps of 8 rows.
void WriteTraining(const fs::path& dir, double wall_s, double tokens, double tok_s, double loss, const std::string& kind) {
  Write(dir / "training_run.json",
        StrCat(R"({"wall_time_s": )", wall_s, R"(, "tokens": )", tokens, R"(, "tokens_per_s": )", tok_s,
               R"(, "final_loss": )", loss, R"(, "steps": {"done": 1244, "start": 0, "total": 1244},
                 "config": {"batch": {"micro_batch": 1, "grad_accum": 8}, "data": {"loss": ")", kind, R"(", "max_seq_len": 3072},
                            "lora": {"rank": 64}, "memory": {"remat": true}}})"));
  Write(dir / "metrics.jsonl", StrCat(R"({"step": 1, "loss": 3.0, "grad_norm": 9.5})", "\n",
                                      R"({"step": 2, "loss": 2.0, "grad_norm": 4.5})", "\n\n",
                                      R"({"step": 3, "loss": )", loss, R"(, "grad_norm": 1.25})", "\n"));
}

void WriteEval(const fs::path& dir, double p1, double p5, int all, int none) {
  Write(dir / "summary.json",
        StrCat(R"({"pass_at_k": {"1": )", p1, R"(, "5": )", p5, R"(}, "problem_count": 156, "problems_all_pass": )", all,
               R"(, "problems_none_pass": )", none, R"(, "problems": [
                 {"problem": "Prob001_zero", "n": 5, "c": 5, "rate": 1.0},
                 {"problem": "Prob002_<and>", "n": 5, "c": 2, "rate": 0.4},
                 {"problem": "Prob003_wire", "n": 5, "c": 0, "rate": 0.0}]})"));
}

std::string Point(double rate, double peak, double out_tps, double ttft, double tpot) {
  const std::string r = rate < 0 ? "\"inf\"" : StrCat(rate);
  return StrCat(R"({"request_rate": )", r, R"(, "output_throughput": )", out_tps, R"(, "max_output_tokens_per_s": )", peak,
                R"(, "median_ttft_ms": )", ttft, R"(, "median_tpot_ms": )", tpot, R"(, "p99_itl_ms": 22.29,
                 "completed": 30, "total_input_tokens": 15360, "total_output_tokens": 7680, "date": "20260501-120000"})");
}

// The TPU run: all three parts, serving as a gemmakit sweep summary.
fs::path TpuRun(const std::string& name) {
  const fs::path d = TestTempDir(name);
  WriteTraining(d / "train", 3.34 * 3600, 9.17e6, 763, 0.072, "assistant");
  WriteEval(d / "eval", 0.6410, 0.7949, 89, 50);
  const std::string p4 = Point(4, 1100, 900, 45, 18.71), pinf = Point(-1, 1403, 1300, 235, 19.5);
  Write(d / "bench" / "sweep-tpu-gemma-20260501-120000.json",
        StrCat(R"({"gemmakit_sweep": 1, "date": "20260501-120000", "points": [)",
               p4.substr(0, p4.size() - 1), R"(, "input_len": 512, "output_len": 256, "result_file": "bench/tpu-4.0qps.json"}, )",
               pinf.substr(0, pinf.size() - 1), R"(, "input_len": 512, "output_len": 256}], "summary": []})"));
  Write(d / "run.json", R"({"label": "TPU v5p-8", "hardware": "tpu-v5p-8", "training_price_per_hour": 16.80,
                            "serving_price_per_hour": 21.52})");
  return d;
}

// The GPU run: vLLM point results (no gemmakit block: lengths from the token totals).
fs::path GpuRun(const std::string& name) {
  const fs::path d = TestTempDir(name);
  WriteTraining(d / "hf", 5.39 * 3600, 486 * 5.39 * 3600, 486, 2.258, "all");
  WriteEval(d / "vllm-eval", 0.6974, 0.8141, 101, 39);
  Write(d / "bench" / "vllm-4.0qps-gemma-20260501.json", Point(4, 1200, 950, 51, 18.42));
  Write(d / "bench" / "vllm-infqps-gemma-20260501.json", Point(-1, 1490, 1350, 475, 19.0));
  Write(d / "run.json", R"({"label": "GPU 2xH100", "price_per_hour": 22.12})");
  return d;
}

std::vector<Run> Load(const std::vector<fs::path>& dirs) {
  std::vector<RunSpec> specs;
  for (const fs::path& d : dirs) {
    auto s = LoadRunSpec(d.string());
    EXPECT_TRUE(s.ok()) << s.message();
    specs.push_back(*s);
  }
  auto runs = LoadRuns(specs);
  EXPECT_TRUE(runs.ok()) << runs.message();
  return runs.ok() ? *runs : std::vector<Run>{};
}

std::string Md(const Table& t) {
  Report r{"t", {{"s", "s", {t}, {}}}};
  return RenderMarkdown(r, "");
}

TEST(ReportFormatTest, NumbersAsTheReferenceCasePrintsThem) {
  EXPECT_EQ(Grouped(1403), "1,403");
  EXPECT_EQ(Grouped(999), "999");
  EXPECT_EQ(Grouped(-1234567.5, 1), "-1,234,567.5");
  EXPECT_EQ(Grouped(-0.0), "0");
  EXPECT_EQ(Duration(28.9), "28.9 s");
  EXPECT_EQ(Duration(750), "12.5 min");
  EXPECT_EQ(Duration(3.34 * 3600), "3.34 h");
  EXPECT_EQ(Millis(1443.2), "1,443 ms");
  EXPECT_EQ(Millis(18.71), "18.7 ms");
  EXPECT_EQ(Millis(2.314), "2.31 ms");
  EXPECT_EQ(Rate(std::numeric_limits<double>::infinity()), "burst");
  EXPECT_EQ(Rate(0.5), "0.5 req/s");
  EXPECT_EQ(Tokens(5.0508e6), "5.05M");
  EXPECT_EQ(Money(56.112), "$56.11");
  EXPECT_EQ(Money(0.0041), "$0.0041");
  EXPECT_EQ(Money(0.000408), "$0.00041");
  EXPECT_EQ(Money(0), "$0.00");
}

TEST(ReportTest, TrainingTableCarriesTheReferenceNumbers) {
  const auto runs = Load({TpuRun("gk_report_tpu1"), GpuRun("gk_report_gpu1")});
  ASSERT_EQ(runs.size(), 2u);
  const std::string md = Md(TrainingTable(runs));
  EXPECT_EQ(RowOf(md, "wall-clock"), "| wall-clock | 3.34 h | 5.39 h |");
  EXPECT_EQ(RowOf(md, "throughput"), "| throughput | 763 tok/s | 486 tok/s |");
  // 12,024 s / (1,244 steps x 8 rows) and 19,404 s / 9,952.
  EXPECT_EQ(RowOf(md, "time per sample"), "| time per sample | 1.21 s | 1.95 s |");
  EXPECT_EQ(RowOf(md, "final training loss"), "| final training loss | 0.072 (assistant-only) | 2.258 (all tokens) |");
  EXPECT_EQ(RowOf(md, "total cost"), "| total cost | $56.11 | $119.23 |");
  // $56.112 / 9.17M tokens; $119.2268 / (486 x 19,404 = 9.43M).
  EXPECT_EQ(RowOf(md, "cost per 1M tokens trained"), "| cost per 1M tokens trained | $6.12 | $12.64 |");
}

TEST(ReportTest, EvalServingCostAndTcoTables) {
  const auto runs = Load({TpuRun("gk_report_tpu2"), GpuRun("gk_report_gpu2")});
  ASSERT_EQ(runs.size(), 2u);
  const std::string ev = Md(EvalTable(runs));
  EXPECT_EQ(RowOf(ev, "pass@1"), "| pass@1 | 0.6410 | 0.6974 |");
  EXPECT_EQ(RowOf(ev, "pass@5"), "| pass@5 | 0.7949 | 0.8141 |");
  EXPECT_EQ(RowOf(ev, "problems at 100 % / at 0 %"), "| problems at 100 % / at 0 % | 89 / 50 | 101 / 39 |");

  const std::string sv = Md(ServingTable(runs, {}));
  EXPECT_EQ(RowOf(sv, "512 / 256"), "| 512 / 256 | peak output tok/s | 1,403 (at burst) | 1,490 (at burst) |");
  EXPECT_NE(sv.find("|  | median TTFT at 4 req/s | 45.0 ms | 51.0 ms |"), std::string::npos) << sv;
  EXPECT_NE(sv.find("|  | median TPOT at 4 req/s | 18.7 ms | 18.4 ms |"), std::string::npos) << sv;
  ReportOptions burst;
  burst.at_rate = std::numeric_limits<double>::infinity();
  EXPECT_NE(Md(ServingTable(runs, burst)).find("|  | median TTFT at burst | 235 ms | 475 ms |"), std::string::npos);

  // FACTS §7: 1,403 tok/s x 3,600 s = 5.05M tok/h; $21.52 / 5.05 = $4.26. GPU: $22.12 / 5.364M = $4.12
  // (FACTS prints $4.13 from the rounded 5.36M).
  const std::string cost = Md(CostTable(runs));
  EXPECT_EQ(RowOf(cost, "512 / 256"), "| 512 / 256 | output tokens/hour (peak) | 5.05M | 5.36M |");
  EXPECT_NE(cost.find("|  | $ per 1M output tokens (peak) | $4.26 | $4.12 |"), std::string::npos) << cost;

  // FACTS §6, every row.
  const std::string tco = Md(TcoTable(runs, {}));
  EXPECT_EQ(RowOf(tco, "training"), "| training | $56.11 | $119.23 |");
  EXPECT_EQ(RowOf(tco, "+ 1 h serving"), "| + 1 h serving | $77.63 | $141.35 |");
  EXPECT_EQ(RowOf(tco, "+ 8 h serving"), "| + 8 h serving | $228.27 | $296.19 |");
  EXPECT_EQ(RowOf(tco, "+ 24 h serving"), "| + 24 h serving | $572.59 | $650.11 |");
}

TEST(ReportTest, AdvantageSaysWhichIsBetter) {
  const auto runs = Load({TpuRun("gk_report_tpu3"), GpuRun("gk_report_gpu3")});
  ASSERT_EQ(runs.size(), 2u);
  const auto hs = Headlines(runs, {});
  const std::string md = Md(AdvantageTable(runs, hs, 1));
  EXPECT_EQ(RowOf(md, "training throughput"),
            "| training throughput | 763 tok/s | 486 tok/s | 0.64x | TPU v5p-8, 1.57x higher |");
  EXPECT_EQ(RowOf(md, "training cost"), "| training cost | $56.11 | $119.23 | 2.12x | TPU v5p-8, 2.12x lower |");
  EXPECT_EQ(RowOf(md, "pass@1"), "| pass@1 | 0.6410 | 0.6974 | 1.09x | GPU 2xH100, 1.09x higher |");
  // Assistant-only vs all-token loss: the ratio is shown, no winner claimed.
  EXPECT_NE(RowOf(md, "final training loss").find("not comparable"), std::string::npos);
  EXPECT_EQ(RowOf(md, "TCO: training + 1 h serving"),
            "| TCO: training + 1 h serving | $77.63 | $141.35 | 1.82x | TPU v5p-8, 1.82x lower |");
  const plot::BarChart chart = AdvantageChart(runs, hs, 1);
  EXPECT_FALSE(chart.bars.empty());
  for (const plot::Bar& b : chart.bars) EXPECT_NE(b.label, "final training loss");
}

TEST(ReportTest, UnequalTrainingIsNotRanked) {
  const fs::path tpu = TpuRun("gk_report_tpu7"), gpu = GpuRun("gk_report_gpu7");
  Write(gpu / "hf" / "training_run.json",
        R"({"wall_time_s": 100, "tokens": 1000, "tokens_per_s": 10, "final_loss": 3.5, "steps": {"done": 10},
            "config": {"batch": {"micro_batch": 1, "grad_accum": 8}, "data": {"loss": "assistant"}}})");
  const auto runs = Load({tpu, gpu});
  ASSERT_EQ(runs.size(), 2u);
  const std::string md = Md(AdvantageTable(runs, Headlines(runs, {}), 1));
  EXPECT_NE(RowOf(md, "training cost").find("not comparable: unequal training (9952 vs 80 samples)"), std::string::npos) << md;
  EXPECT_NE(RowOf(md, "final training loss").find("not comparable: unequal training"), std::string::npos) << md;
  EXPECT_NE(RowOf(md, "TCO: training + 1 h serving").find("not comparable"), std::string::npos) << md;
  // Rates are per token and per sample: still ranked.
  EXPECT_EQ(RowOf(md, "training time per sample"),
            "| training time per sample | 1.21 s | 1.25 s | 1.03x | TPU v5p-8, 1.03x lower |");
}

TEST(ReportTest, MissingPartsSayNotMeasured) {
  const fs::path tpu = TpuRun("gk_report_tpu4");
  const fs::path eval_only = TestTempDir("gk_report_evalonly");
  WriteEval(eval_only / "e", 0.5, 0.6, 10, 20);
  const auto runs = Load({tpu, eval_only});
  ASSERT_EQ(runs.size(), 2u);
  const std::string tr = Md(TrainingTable(runs));
  EXPECT_EQ(RowOf(tr, "wall-clock"), "| wall-clock | 3.34 h | not measured |");
  EXPECT_EQ(RowOf(tr, "total cost"), "| total cost | $56.11 | not measured |");
  EXPECT_EQ(RowOf(Md(ServingTable(runs, {})), "512 / 256"), "| 512 / 256 | peak output tok/s | 1,403 (at burst) | not measured |");
  EXPECT_EQ(RowOf(Md(TcoTable(runs, {})), "training"), "| training | $56.11 | not measured |");
  // A run with artifacts but without prices: the costs say why they are missing.
  const fs::path gpu = GpuRun("gk_report_gpu4");
  fs::remove(gpu / "run.json");
  const auto priced = Load({tpu, gpu});
  EXPECT_EQ(RowOf(Md(TrainingTable(priced)), "total cost"), "| total cost | $56.11 | no price given |");
  // The loss chart draws the runs that have metrics.jsonl; with none it is not drawn at all.
  const auto figs = TrainingFigures(runs);
  ASSERT_EQ(figs.size(), 2u);
  EXPECT_TRUE(plot::svgtest::WellFormed(figs[0].svg));
  EXPECT_EQ(plot::svgtest::Count(figs[0].svg, "<polyline"), 1u);
  const fs::path serve_only = TestTempDir("gk_report_serveonly");
  Write(serve_only / "x-infqps-y.json", Point(-1, 10, 9, 1, 1));
  const auto no_training = Load({eval_only, serve_only});
  EXPECT_EQ(TrainingFigures(no_training)[0].svg, "");
  const std::string md = RenderMarkdown(BuildReport(no_training, {}, "r"), "r-");
  EXPECT_NE(md.find("Training loss: not measured"), std::string::npos);
}

TEST(ReportTest, PageIsSelfContainedAndEscaped) {
  const fs::path tpu = TpuRun("gk_report_tpu5"), gpu = GpuRun("gk_report_gpu5");
  Write(gpu / "run.json", R"({"label": "<script>alert(1)</script> & GPU", "price_per_hour": 22.12})");
  const auto runs = Load({tpu, gpu});
  ASSERT_EQ(runs.size(), 2u);
  const fs::path out = TestTempDir("gk_report_out") + "/sub/report.html";
  auto written = WriteReport(BuildReport(runs, {}, "TPU vs GPU"), out.string());
  ASSERT_TRUE(written.ok()) << written.message();
  auto html = ReadFile(out.string());
  ASSERT_TRUE(html.ok());
  EXPECT_EQ(html->find("<script"), std::string::npos);
  EXPECT_NE(html->find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; GPU"), std::string::npos);
  EXPECT_NE(html->find("Prob002_&lt;and&gt;"), std::string::npos);  // a problem name inside an SVG tooltip
  EXPECT_EQ(html->find("src="), std::string::npos);
  EXPECT_EQ(html->find("href=\"http"), std::string::npos);
  EXPECT_EQ(html->find("<link"), std::string::npos);
  // Every chart has data and is well-formed; the Markdown links each SVG written beside it.
  auto md = ReadFile((out.parent_path() / "report.md").string());
  ASSERT_TRUE(md.ok());
  size_t svgs = 0;
  for (const std::string& p : *written) {
    if (fs::path(p).extension() != ".svg") continue;
    ++svgs;
    auto svg = ReadFile(p);
    ASSERT_TRUE(svg.ok());
    EXPECT_TRUE(plot::svgtest::WellFormed(*svg)) << p;
    EXPECT_NE(html->find(*svg), std::string::npos) << p << " is not inline in the page";
    EXPECT_NE(md->find("](" + fs::path(p).filename().string() + ")"), std::string::npos) << p;
  }
  // loss, grad_norm, pass@1 per problem, score distribution, throughput and TTFT, advantage.
  EXPECT_EQ(svgs, 7u);
  EXPECT_NE(md->find("| + 24 h serving | $572.59 | $650.11 |"), std::string::npos);
}

TEST(ReportTest, NewestResultAtARateWins) {
  const fs::path d = TestTempDir("gk_report_rerun");
  std::string old = Point(4, 100, 90, 50, 5), fresh = Point(4, 200, 180, 40, 4);
  fresh.replace(fresh.find("20260501-120000"), 15, "20260601-120000");
  Write(d / "b" / "a-4.0qps-old.json", old);
  Write(d / "b" / "a-4.0qps-new.json", fresh);
  auto serving = LoadServing({}, {(d / "b" / "a-4.0qps-new.json").string(), (d / "b" / "a-4.0qps-old.json").string()});
  ASSERT_TRUE(serving.ok()) << serving.message();
  ASSERT_EQ(serving->size(), 1u);
  ASSERT_EQ((*serving)[0].points.size(), 1u);
  EXPECT_EQ((*serving)[0].points[0].peak_output_tok_s, 200);
  EXPECT_EQ(WorkloadName((*serving)[0]), "512 in / 256 out");
}

Result<std::vector<Run>> TryLoad(const std::vector<fs::path>& dirs) {
  std::vector<RunSpec> specs;
  for (const fs::path& d : dirs) {
    GK_ASSIGN_OR_RETURN(RunSpec s, LoadRunSpec(d.string()));
    specs.push_back(s);
  }
  return LoadRuns(specs);
}

// The roofline section: the reference case's 31B runs on their catalog machines and meshes.
// The projections are tools/plan's (README: 9429 and 10163 tok/s), the ratios measured / that.
TEST(ReportTest, ProjectionBesideTheMeasurement) {
  auto catalog = cost::HardwareCatalog::Default();
  ASSERT_TRUE(catalog.ok()) << catalog.message();
  std::vector<RunSpec> specs;
  for (auto [dir, hw, mesh] : {std::tuple{TpuRun("proj_tpu"), "tpu-v5p-8", "fsdp=1,tp=4"},
                               std::tuple{GpuRun("proj_gpu"), "a3-highgpu-2g", "fsdp=2,tp=1"}}) {
    auto s = LoadRunSpec(dir.string());
    ASSERT_TRUE(s.ok()) << s.message();
    s->model = "31b";
    s->mesh = mesh;
    auto m = catalog->Find(hw);
    ASSERT_TRUE(m.ok()) << m.message();
    s->machine = *m;
    specs.push_back(*s);
  }
  auto runs = LoadRuns(specs);
  ASSERT_TRUE(runs.ok()) << runs.message();
  const std::string md = Md(ProjectionTable(*runs, {}));
  EXPECT_EQ(RowOf(md, "machine"), "| machine | tpu-v5p-8 (4 × tpu-v5p) | a3-highgpu-2g (2 × h100) |") << md;
  EXPECT_EQ(RowOf(md, "measured training tok/s"), "| measured training tok/s | 763.0 | 486.0 |") << md;
  EXPECT_EQ(RowOf(md, "measured / projected (training)"), "| measured / projected (training) | 0.081 | 0.048 |") << md;
  EXPECT_NE(RowOf(md, "512 in / 256 out: projected TPOT ms (batch 1)").find("| 512 in"), std::string::npos) << md;
  // Without a machine each cell says so; the section is still there.
  (*runs)[1].spec.machine.reset();
  const std::string md2 = Md(ProjectionTable(*runs, {}));
  EXPECT_NE(RowOf(md2, "machine").find("no hardware given"), std::string::npos) << md2;
}

TEST(ReportTest, ClearErrors) {
  const fs::path tpu = TpuRun("gk_report_tpu6");
  auto one = TryLoad({tpu});
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.message(), "report needs at least two RUN_DIRs to compare, got 1");

  const fs::path empty = TestTempDir("gk_report_empty");
  fs::create_directories(empty / "nothing");
  auto none = TryLoad({tpu, empty});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find(StrCat("RUN_DIR ", empty.string(), ": no artifacts found")), std::string::npos) << none.message();

  auto missing = TryLoad({tpu, tpu / "no-such-dir"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("not a directory"), std::string::npos) << missing.message();

  const fs::path bad = GpuRun("gk_report_bad");
  Write(bad / "hf" / "training_run.json", "{\"wall_time_s\": 1,");
  auto malformed = TryLoad({tpu, bad});
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.message().find((bad / "hf" / "training_run.json").string() + ": not valid JSON"), std::string::npos)
      << malformed.message();

  // A number too large for a double made nlohmann throw out_of_range (an abort before).
  Write(bad / "hf" / "training_run.json", R"({"wall_time_s": 1e999})");
  auto huge = TryLoad({tpu, bad});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("training_run.json: not valid JSON: number overflow"), std::string::npos)
      << huge.message();

  Write(bad / "hf" / "training_run.json", R"({"wall_time_s": 1, "tokens": "many", "tokens_per_s": 1})");
  auto wrong_type = TryLoad({tpu, bad});
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.message().find("field \"tokens\" must be a number"), std::string::npos) << wrong_type.message();

  WriteTraining(bad / "hf", 1, 1, 1, 1, "all");
  Write(bad / "hf" / "metrics.jsonl", "{\"step\": 1, \"loss\": 2}\nnot json\n");
  auto bad_line = TryLoad({tpu, bad});
  ASSERT_FALSE(bad_line.ok());
  EXPECT_NE(bad_line.message().find("metrics.jsonl:2: not valid JSON"), std::string::npos) << bad_line.message();

  WriteTraining(bad / "hf", 1, 1, 1, 1, "all");
  WriteTraining(bad / "second", 1, 1, 1, 1, "all");
  auto two = TryLoad({tpu, bad});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.message().find("holds 2 training runs"), std::string::npos) << two.message();
  fs::remove_all(bad / "second");

  Write(bad / "run.json", R"({"label": "GPU", "serving_price": 3})");
  auto typo = TryLoad({tpu, bad});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.message().find("unknown key \"serving_price\""), std::string::npos) << typo.message();
  Write(bad / "run.json", R"({"label": "TPU v5p-8"})");
  auto same = TryLoad({tpu, bad});
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.message().find("two runs are labelled \"TPU v5p-8\""), std::string::npos) << same.message();

  Write(bad / "run.json", R"({"label": "GPU"})");
  Write(bad / "bench" / "sweep-x.json", R"({"points": []})");
  auto not_sweep = TryLoad({tpu, bad});
  ASSERT_FALSE(not_sweep.ok());
  EXPECT_NE(not_sweep.message().find("not a bench serve sweep summary"), std::string::npos) << not_sweep.message();

  auto runs = TryLoad({tpu, GpuRun("gk_report_gpu6")});
  ASSERT_TRUE(runs.ok());
  auto to_md = WriteReport(BuildReport(*runs, {}, "t"), (TestTempDir("gk_report_mdout") + "/r.md"));
  ASSERT_FALSE(to_md.ok());
  EXPECT_NE(to_md.message().find("give the HTML page's file name"), std::string::npos);
}

TEST(ReportTest, PricesFromALookupFillOnlyWhatIsOpen) {
  RunSpec s;
  s.hardware = "tpu-v5p-8";
  s.serving_price_per_hour = 1.0;
  ASSERT_TRUE(FillPrices(s, [](const std::string& name) -> Result<HardwarePrices> {
                if (name != "tpu-v5p-8") return Result<HardwarePrices>::Error("unknown hardware");
                return HardwarePrices{16.80, 21.52};
              }).ok());
  EXPECT_EQ(*s.training_price_per_hour, 16.80);
  EXPECT_EQ(*s.serving_price_per_hour, 1.0);
  s.hardware = "abacus";
  s.training_price_per_hour.reset();
  const Status st = FillPrices(s, [](const std::string&) { return Result<HardwarePrices>::Error("unknown hardware"); });
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("hardware \"abacus\": unknown hardware"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace gk::report
