// Small self-contained SVG chart writers.
// Line charts (`gemmakit bench compare`): title, axis labels, "nice" ticks with gridlines, an
// optional log2 x axis (request rates 1, 2, 4 .. 64), one polyline with circle markers per
// series, and a legend. x == +inf is drawn in a categorical slot at the right end of the x axis
// (vLLM's "inf" request rate, labelled "burst").
// Bar charts (`gemmakit eval verilog`): one bar per category, e.g. 156 problems' pass rates.
// Output is deterministic: fixed number formatting, no locale, no time stamps.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gk::plot {

struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y); drawn sorted by x, +inf last
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log2_x = false;              // x values <= 0 cannot be drawn on it and are skipped
  std::string inf_label = "burst";  // tick label of the x == +inf slot
  std::vector<PlotSeries> series;
  int width = 720, height = 440;
  bool markers = true;  // a circle per point; off for long curves (a loss per step)
};

// The whole document, starting with "<svg" and ending with "</svg>\n".
std::string RenderSvg(const LineChart& chart);

struct Bar {
  std::string label;  // the category's x tick label
  double value = 0;
  std::string tooltip;  // a <title> shown on hover; "" gives "label: value"
};

struct BarChart {
  std::string title, x_label, y_label;
  std::vector<Bar> bars;  // drawn in this order, left to right
  // The y axis spans [min(0, lowest), max(y_max, highest)] rounded out to nice ticks; a fixed
  // top such as 100 for percentages keeps charts of different runs comparable.
  double y_max = 0;
  int value_decimals = 0;  // of the value printed above each bar, when the bars are wide enough
  // The document's size while the x labels fit side by side. When they do not they are rotated
  // (and where even rotated they would overlap only every m-th is drawn), and the document grows
  // downwards to hold them.
  int width = 720, height = 440;
  size_t max_label_chars = 32;  // longer labels are cut, ending in "..."; tooltips keep them whole
};

// The whole document, as RenderSvg.
std::string RenderBarSvg(const BarChart& chart);

// Grouped bars (`gemmakit report`): per category one bar per series side by side, a legend,
// e.g. pass@1 of each of 156 problems for two runs. A NaN value draws no bar (not measured).
struct BarSeries {
  std::string label;
  std::vector<double> values;  // one per category
};

struct GroupedBarChart {
  std::string title, x_label, y_label;
  std::vector<std::string> categories;
  std::vector<BarSeries> series;
  double y_max = 0;        // as BarChart::y_max
  int value_decimals = 0;  // of the tooltips
  int width = 720, height = 440;
  size_t max_label_chars = 32;
};

// The whole document, as RenderSvg; x labels are rotated and thinned as in RenderBarSvg.
std::string RenderGroupedBarSvg(const GroupedBarChart& chart);

// &, <, >, " and ' as entities, for text and attribute values.
std::string XmlEscape(std::string_view s);

// Ticks at multiples of 1, 2 or 5 x 10^k covering [lo, hi], about max_ticks of them.
std::vector<double> NiceTicks(double lo, double hi, int max_ticks);

}  // namespace gk::plot
