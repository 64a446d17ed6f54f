// A small self-contained SVG line-chart writer for `gemmakit bench compare`: title, axis labels,
// "nice" ticks with gridlines, an optional log2 x axis (request rates 1, 2, 4 .. 64), one
// polyline with circle markers per series, and a legend. x == +inf is drawn in a categorical
// slot at the right end of the x axis (vLLM's "inf" request rate, labelled "burst").
// Output is deterministic: fixed number formatting, no locale, no time stamps.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gk::bench {

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
};

// The whole document, starting with "<svg" and ending with "</svg>\n".
std::string RenderSvg(const LineChart& chart);

// &, <, >, " and ' as entities, for text and attribute values.
std::string XmlEscape(std::string_view s);

// Ticks at multiples of 1, 2 or 5 x 10^k covering [lo, hi], about max_ticks of them.
std::vector<double> NiceTicks(double lo, double hi, int max_ticks);

}  // namespace gk::bench
