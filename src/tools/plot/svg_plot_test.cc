#include "tools/plot/svg_plot.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "tools/plot/svg_testing.h"

namespace gk::plot {
namespace {

using svgtest::Count;
using svgtest::WellFormed;

TEST(SvgPlotTest, NiceTicksAndEscape) {
  EXPECT_EQ(NiceTicks(0, 763, 6), (std::vector<double>{0, 200, 400, 600, 800}));
  const std::vector<double> tenths = NiceTicks(0, 1, 6);  // 0, 0.2 .. 1
  ASSERT_EQ(tenths.size(), 6u);
  EXPECT_DOUBLE_EQ(tenths[3], 0.6);
  EXPECT_DOUBLE_EQ(tenths[5], 1);
  EXPECT_EQ(NiceTicks(-30, 70, 6), (std::vector<double>{-40, -20, 0, 20, 40, 60, 80}));
  EXPECT_EQ(NiceTicks(0, 0, 6).front(), 0);
  EXPECT_EQ(NiceTicks(0, 0, 6).back(), 1);
  EXPECT_EQ(NiceTicks(0, 100, 6), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(XmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
}

TEST(SvgPlotTest, WellFormedCatchesBrokenDocuments) {
  EXPECT_TRUE(WellFormed("<svg a=\"1\">\n<g><text>x &amp; y</text></g>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg>\n<text>a < b</text>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg>\n<text>a > b</text>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg>\n<text>a & b</text>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg>\n<text>a</g>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg>\n<rect x=\"1/>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg>\n<g>\n</svg>\n"));
  EXPECT_FALSE(WellFormed("<svg></svg>"));
}

TEST(SvgPlotTest, LineChartIsWellFormedAndDeterministic) {
  LineChart c;
  c.title = "Throughput <in & out>", c.x_label = "request rate (req/s)", c.y_label = "tok/s", c.log2_x = true;
  const double inf = std::numeric_limits<double>::infinity();
  c.series = {{"TPU \"v5e\"", {{1, 100}, {4, 380}, {2, 200}, {inf, 420}}}, {"GPU", {{1, 90}, {64, 300}}}};
  const std::string svg = RenderSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_EQ(Count(svg, "<circle"), 6u);
  EXPECT_NE(svg.find("Throughput &lt;in &amp; out&gt;"), std::string::npos);
  EXPECT_NE(svg.find("TPU &quot;v5e&quot;"), std::string::npos);
  EXPECT_NE(svg.find(">burst</text>"), std::string::npos);
  EXPECT_NE(svg.find(">64</text>"), std::string::npos);  // log2 ticks 1, 2, 4 .. 64
  EXPECT_NE(svg.find(">8</text>"), std::string::npos);
  EXPECT_EQ(RenderSvg(c), svg);
}

TEST(SvgPlotTest, EmptyAndBurstOnlyCharts) {
  LineChart c;
  c.title = "nothing";
  c.series = {{"A", {}}};
  std::string svg = RenderSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find("no data"), std::string::npos);
  c.log2_x = true;
  c.series = {{"A", {{std::numeric_limits<double>::infinity(), 5}}}};
  svg = RenderSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find(">burst</text>"), std::string::npos);
  EXPECT_EQ(Count(svg, "<circle"), 1u);
}

// ---- bar charts ----

TEST(SvgBarChartTest, FewBarsSideBySideWithValuesTicksAndEscaping) {
  BarChart c;
  c.title = "Problems <by> passes", c.x_label = "passing samples & more", c.y_label = "problems";
  c.bars = {{"0/5", 39, ""}, {"1/5", 4, ""}, {"5/5", 101, "all \"five\""}};
  const std::string svg = RenderBarSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(Count(svg, "<rect"), 4u);  // the background and three bars
  EXPECT_EQ(Count(svg, "<title>"), 3u);
  EXPECT_NE(svg.find("<title>0/5: 39</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>all &quot;five&quot;</title>"), std::string::npos);
  EXPECT_NE(svg.find("Problems &lt;by&gt; passes"), std::string::npos);
  EXPECT_NE(svg.find(">passing samples &amp; more</text>"), std::string::npos);
  EXPECT_NE(svg.find(">101</text>"), std::string::npos);  // the value above the bar
  EXPECT_NE(svg.find(">150</text>"), std::string::npos);  // the top y tick: 0, 50, 100, 150
  EXPECT_NE(svg.find(">5/5</text>"), std::string::npos);  // an x label, not rotated
  EXPECT_EQ(svg.find("rotate(-90 "), std::string::npos);
  EXPECT_NE(svg.find("height=\"440\""), std::string::npos);
  EXPECT_EQ(RenderBarSvg(c), svg);
}

TEST(SvgBarChartTest, BarsStandOnTheZeroLine) {
  BarChart c;
  c.width = 200, c.height = 200;  // plot area x 72..176, y 40..144
  c.y_max = 100;
  c.bars = {{"a", 100, ""}, {"b", 50, ""}, {"c", 0, ""}, {"d", std::numeric_limits<double>::quiet_NaN(), ""}};
  const std::string svg = RenderBarSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  // slots of 26 px, bars 80 % of a slot; 100 reaches the top at y 40, 50 half-way.
  EXPECT_NE(svg.find("<rect x=\"74.6\" y=\"40.0\" width=\"20.8\" height=\"104.0\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("<rect x=\"100.6\" y=\"92.0\" width=\"20.8\" height=\"52.0\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("<rect x=\"126.6\" y=\"144.0\" width=\"20.8\" height=\"0.0\""), std::string::npos) << svg;
  EXPECT_EQ(Count(svg, "<title>"), 3u);  // NaN draws no bar
  EXPECT_NE(svg.find(">d</text>"), std::string::npos);  // but keeps its slot and label
}

TEST(SvgBarChartTest, ManyBarsRotateThinAndCutLabels) {
  BarChart c;
  c.width = 1200, c.y_max = 100, c.max_label_chars = 20;
  for (int i = 1; i <= 156; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "Prob%03d_review2015_fancytimer", i);
    c.bars.push_back({name, i % 3 ? 100.0 : 0.0, ""});
  }
  const std::string svg = RenderBarSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(Count(svg, "<title>"), 156u);
  EXPECT_NE(svg.find("<title>Prob155_review2015_fancytimer: 100</title>"), std::string::npos);  // whole in tooltips
  EXPECT_NE(svg.find("<title>Prob156_review2015_fancytimer: 0</title>"), std::string::npos);
  // 1104 px / 156 bars = 7.1 px a slot: every 2nd label, rotated, cut to 20 bytes.
  EXPECT_EQ(Count(svg, "rotate(-90 "), 78u);
  EXPECT_NE(svg.find(">Prob001_review201...</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">Prob002_review201...</text>"), std::string::npos);
  EXPECT_NE(svg.find(">Prob155_review201...</text>"), std::string::npos);
  EXPECT_EQ(svg.find("fancytimer</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">100</text>", svg.find("<rect x")), std::string::npos);  // no values on narrow bars
  // 20 chars at 6.5 px + 10 px of room instead of 16: the document is 124 px taller.
  EXPECT_NE(svg.find("height=\"564\""), std::string::npos);
}

TEST(SvgBarChartTest, CutKeepsUtf8WholeAndEmptyChartSaysNoData) {
  BarChart c;
  c.max_label_chars = 8;
  c.bars = {{"ab\xC3\xA9\xC3\xA9\xC3\xA9xyz", 1, ""}};  // "abéééxyz": byte 5 is inside the second é
  std::string svg = RenderBarSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find(">ab\xC3\xA9...</text>"), std::string::npos) << svg;

  BarChart empty;
  empty.title = "nothing";
  svg = RenderBarSvg(empty);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find(">no data</text>"), std::string::npos);
  EXPECT_EQ(Count(svg, "<rect"), 1u);
}

TEST(SvgGroupedBarChartTest, OneBarPerSeriesAndCategoryNaNDrawsNone) {
  GroupedBarChart c;
  c.title = "pass@1 per problem";
  c.categories = {"Prob001", "Prob<2>"};
  c.series = {{"TPU", {100, 40}}, {"GPU", {std::numeric_limits<double>::quiet_NaN(), 0}}};
  c.y_max = 100;
  const std::string svg = RenderGroupedBarSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  // The background, three bars (GPU has no Prob001 bar) and two legend swatches.
  EXPECT_EQ(Count(svg, "<rect"), 6u);
  EXPECT_EQ(Count(svg, "<title>"), 3u);
  EXPECT_NE(svg.find("<title>TPU, Prob&lt;2&gt;: 40</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">GPU</text>"), std::string::npos);

  GroupedBarChart empty;
  empty.categories = {"a"};
  EXPECT_NE(RenderGroupedBarSvg(empty).find(">no data</text>"), std::string::npos);
}

TEST(SvgPlotTest, MarkersOffDrawsTheLineOnly) {
  LineChart c;
  c.markers = false;
  c.series = {{"long", {{1, 3}, {2, 2}, {3, 1}}}, {"one point", {{1, 2}}}};
  const std::string svg = RenderSvg(c);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_EQ(Count(svg, "<circle"), 1u);  // a single point would be invisible as a line
}

}  // namespace
}  // namespace gk::plot
