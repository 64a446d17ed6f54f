// `cost --paper`: every cost figure of FACTS.md §3 and §6, recomputed from the report's
// inputs, as printed; and the figures the report gets wrong, flagged as such.
#include "tools/cost/paper.h"

#include <gtest/gtest.h>

#include <map>

namespace gk::cost {
namespace {

std::map<std::string, PaperFigure> ByLabel() {
  std::map<std::string, PaperFigure> m;
  for (const PaperFigure& f : PaperFigures()) {
    EXPECT_TRUE(m.emplace(f.label, f).second) << "duplicate label " << f.label;
  }
  return m;
}

TEST(CostPaper, TrainingTable) {
  auto f = ByLabel();
  EXPECT_EQ(f["TPU v5p-8 total cost"].computed, "$56.11");
  EXPECT_EQ(f["GPU 2×H100 total cost"].computed, "$119.23");
  EXPECT_EQ(f["TPU v5p-8 time per sample"].computed, "1.21 s");
  EXPECT_EQ(f["GPU 2×H100 time per sample"].computed, "1.94 s");
  EXPECT_EQ(f["TPU v5p-8 tokens trained"].computed, "9.17M");
  // 763 tok/s × 3.34 h = 9.174M tokens gives $6.12, not the report's $6.10 …
  EXPECT_EQ(f["TPU v5p-8 cost per 1M tokens trained"].computed, "$6.12");
  EXPECT_FALSE(f["TPU v5p-8 cost per 1M tokens trained"].Matches());
  EXPECT_EQ(f["GPU 2×H100 cost per 1M tokens trained"].computed, "$12.64");
  EXPECT_FALSE(f["GPU 2×H100 cost per 1M tokens trained"].Matches());
  // … the report's figures follow from the token counts rounded to 0.1M (9.2M, 9.4M).
  EXPECT_EQ(f["TPU v5p-8 cost per 1M tokens, tokens rounded"].computed, "$6.10");
  EXPECT_TRUE(f["TPU v5p-8 cost per 1M tokens, tokens rounded"].Matches());
  EXPECT_EQ(f["GPU 2×H100 cost per 1M tokens, tokens rounded"].computed, "$12.68");
  EXPECT_TRUE(f["GPU 2×H100 cost per 1M tokens, tokens rounded"].Matches());
  EXPECT_EQ(f["TPU faster (wall-clock)"].computed, "1.61×");
  EXPECT_EQ(f["TPU cheaper (training)"].computed, "2.12×");
}

TEST(CostPaper, ServingTable) {
  auto f = ByLabel();
  const std::string s = " short context (512 in / 256 out, burst)", l = " 4096-token context (4096 in / 512 out)";
  EXPECT_EQ(f["TPU v6e-8" + s + " tok/h"].computed, "5.05M");
  EXPECT_EQ(f["GPU 2×H100" + s + " tok/h"].computed, "5.36M");
  EXPECT_EQ(f["TPU v6e-8" + l + " tok/h"].computed, "4.34M");
  EXPECT_EQ(f["GPU 2×H100" + l + " tok/h"].computed, "2.62M");
  // $21.52 / 5.0508M = $4.26 (report $4.27; no input of the report gives it).
  EXPECT_EQ(f["TPU v6e-8" + s + " $/1M output"].computed, "$4.26");
  EXPECT_FALSE(f["TPU v6e-8" + s + " $/1M output"].Matches());
  EXPECT_EQ(f["TPU v6e-8" + s + " $/1M output, tok/h rounded"].computed, "$4.26");
  EXPECT_FALSE(f["TPU v6e-8" + s + " $/1M output, tok/h rounded"].Matches());
  // GPU: $4.12 from 1,490 tok/s; $4.13 from the printed 5.36M tok/h.
  EXPECT_EQ(f["GPU 2×H100" + s + " $/1M output"].computed, "$4.12");
  EXPECT_EQ(f["GPU 2×H100" + s + " $/1M output, tok/h rounded"].computed, "$4.13");
  EXPECT_TRUE(f["GPU 2×H100" + s + " $/1M output, tok/h rounded"].Matches());
  EXPECT_EQ(f["TPU v6e-8" + l + " $/1M output"].computed, "$4.96");  // report $4.95
  EXPECT_FALSE(f["TPU v6e-8" + l + " $/1M output"].Matches());
  EXPECT_EQ(f["GPU 2×H100" + l + " $/1M output"].computed, "$8.44");
  EXPECT_TRUE(f["GPU 2×H100" + l + " $/1M output"].Matches());
}

TEST(CostPaper, TcoTableAndTheInconsistentClaim) {
  auto f = ByLabel();
  const std::pair<const char*, const char*> rows[] = {
      {"TPU training", "$56.11"},   {"GPU training", "$119.23"},
      {"TPU training + 1 h serving", "$77.63"},   {"GPU training + 1 h serving", "$141.35"},
      {"TPU training + 8 h serving", "$228.27"},  {"GPU training + 8 h serving", "$296.19"},
      {"TPU training + 24 h serving", "$572.59"}, {"GPU training + 24 h serving", "$650.11"}};
  for (const auto& [label, dollars] : rows) {
    EXPECT_EQ(f[label].computed, dollars) << label;
    EXPECT_TRUE(f[label].Matches()) << label;
  }
  EXPECT_EQ(f["TPU cheaper, training + 1 h serving"].computed, "1.82×");
  EXPECT_EQ(f["TPU cheaper, training + 8 h serving"].computed, "1.30×");
  EXPECT_EQ(f["TPU cheaper, training + 24 h serving"].computed, "1.14×");
  const PaperFigure& claim = f["report's claim: \"1.82× cheaper end-to-end\" (training + a day of serving)"];
  EXPECT_EQ(claim.computed, "1.14×");
  EXPECT_EQ(claim.report, "1.82×");
  EXPECT_FALSE(claim.Matches());
  EXPECT_NE(claim.note.find("1-hour"), std::string::npos);
}

TEST(CostPaper, FormattedTableCountsTheDifferences) {
  const auto figures = PaperFigures();
  int differ = 0;
  for (const auto& f : figures) differ += f.Matches() ? 0 : 1;
  // $6.10, $12.68, $4.27 (twice: from tok/s and from tok/h), $4.13, $4.95 (twice), 1.82×.
  EXPECT_EQ(differ, 8);
  const std::string text = FormatPaperFigures(figures);
  EXPECT_NE(text.find(std::to_string(differ) + " differ from the report as printed"), std::string::npos);
  EXPECT_NE(text.find("DIFFERS"), std::string::npos);
}

}  // namespace
}  // namespace gk::cost
