#include "tools/plot/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

namespace gk::plot {
namespace {

constexpr int kLeft = 72, kRight = 150, kTop = 40, kBottom = 56;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

// snprintf with the "C" locale's '.', so files are identical on every machine.
std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string Coord(double v) { return Fmt("%.1f", v); }

// The chart's x or y axis: data range [lo, hi] in drawn units (log2 already applied) mapped
// onto pixels [p0, p1], ticks in drawn units with their labels.
struct Axis {
  double lo = 0, hi = 1, p0 = 0, p1 = 1;
  std::vector<std::pair<double, std::string>> ticks;
  std::optional<double> inf_slot;  // x only: where x == +inf is drawn
  double Map(double v) const { return p0 + (v - lo) / (hi - lo) * (p1 - p0); }
};

std::string TickLabel(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return Fmt(("%." + std::to_string(decimals) + "f").c_str(), v);
}

// The drawn x of a data x, or nothing when this axis cannot show it.
std::optional<double> DrawnX(const LineChart& c, const Axis& ax, double x) {
  if (std::isinf(x) && x > 0) return ax.inf_slot;
  if (!std::isfinite(x) || (c.log2_x && x <= 0)) return std::nullopt;
  return c.log2_x ? std::log2(x) : x;
}

Axis MakeXAxis(const LineChart& c) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool has_inf = false;
  for (const PlotSeries& s : c.series) {
    for (const auto& [x, y] : s.points) {
      if (std::isinf(x) && x > 0) has_inf = true;
      if (!std::isfinite(x) || (c.log2_x && x <= 0)) continue;
      const double d = c.log2_x ? std::log2(x) : x;
      lo = std::min(lo, d), hi = std::max(hi, d);
    }
  }
  Axis ax;
  double step = 1;
  if (lo > hi) {  // no finite x: only the inf slot, if any
    ax.lo = -1, ax.hi = 1;
    if (has_inf) ax.inf_slot = 0;
  } else if (c.log2_x) {
    double e0 = std::floor(lo), e1 = std::ceil(hi);
    if (e0 == e1) e0 -= 1, e1 += 1;
    step = std::ceil((e1 - e0) / 10);  // at most ~10 labels: 1, 4, 16 .. for wide ranges
    for (double e = e0;; e += step) {  // the last tick reaches e1 even when step > 1
      ax.ticks.emplace_back(e, Fmt("%g", std::exp2(e)));
      if (e >= e1) break;
    }
    ax.lo = e0, ax.hi = ax.ticks.back().first;
  } else {
    const std::vector<double> t = NiceTicks(lo, hi, 6);
    step = t.size() > 1 ? t[1] - t[0] : 1;
    for (double v : t) ax.ticks.emplace_back(v, TickLabel(v, step));
    ax.lo = t.front(), ax.hi = t.back();
  }
  if (has_inf && !ax.ticks.empty()) ax.inf_slot = ax.hi + step, ax.hi += step;
  ax.p0 = kLeft, ax.p1 = c.width - kRight;
  return ax;
}

Axis MakeYAxis(const LineChart& c) {
  double lo = 0, hi = 0;  // throughputs and latencies: the axis starts at 0
  for (const PlotSeries& s : c.series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
  const std::vector<double> t = NiceTicks(lo, hi, 6);
  const double step = t.size() > 1 ? t[1] - t[0] : 1;
  Axis ax;
  for (double v : t) ax.ticks.emplace_back(v, TickLabel(v, step));
  ax.lo = t.front(), ax.hi = t.back();
  ax.p0 = c.height - kBottom, ax.p1 = kTop;  // SVG y grows downwards
  return ax;
}

std::string Text(double x, double y, const std::string& anchor, const std::string& text,
                 const std::string& extra = "") {
  return "<text x=\"" + Coord(x) + "\" y=\"" + Coord(y) + "\" text-anchor=\"" + anchor + "\"" + extra + ">" +
         XmlEscape(text) + "</text>\n";
}

std::string Line(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + Coord(x1) + "\" y1=\"" + Coord(y1) + "\" x2=\"" + Coord(x2) + "\" y2=\"" + Coord(y2) +
         "\" " + style + "/>\n";
}

std::string Axes(const LineChart& c, const Axis& xa, const Axis& ya) {
  std::string out;
  const double bottom = ya.p0, top = ya.p1, left = xa.p0, right = xa.p1;
  for (const auto& [v, label] : ya.ticks) {
    out += Line(left, ya.Map(v), right, ya.Map(v), "stroke=\"#e0e0e0\"");
    out += Text(left - 6, ya.Map(v) + 4, "end", label);
  }
  for (const auto& [v, label] : xa.ticks) {
    out += Line(xa.Map(v), top, xa.Map(v), bottom, "stroke=\"#e0e0e0\"");
    out += Text(xa.Map(v), bottom + 16, "middle", label);
  }
  if (xa.inf_slot) {
    const double x = xa.Map(*xa.inf_slot);
    out += Line(x, top, x, bottom, "stroke=\"#e0e0e0\" stroke-dasharray=\"4 3\"");
    out += Text(x, bottom + 16, "middle", c.inf_label);
  }
  out += Line(left, bottom, right, bottom, "stroke=\"black\"");
  out += Line(left, top, left, bottom, "stroke=\"black\"");
  out += Text((left + right) / 2, bottom + 38, "middle", c.x_label);
  const double cy = (top + bottom) / 2;
  out += "<text transform=\"translate(18," + Coord(cy) + ") rotate(-90)\" text-anchor=\"middle\">" +
         XmlEscape(c.y_label) + "</text>\n";
  return out;
}

std::string Series(const LineChart& c, const Axis& xa, const Axis& ya, const PlotSeries& s, const char* color) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& [x, y] : s.points) {
    const std::optional<double> dx = DrawnX(c, xa, x);
    if (dx && std::isfinite(y)) pts.emplace_back(*dx, y);
  }
  std::sort(pts.begin(), pts.end());
  std::string poly = "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\" points=\"";
  std::string marks;
  for (size_t i = 0; i < pts.size(); ++i) {
    const std::string px = Coord(xa.Map(pts[i].first)), py = Coord(ya.Map(pts[i].second));
    poly += (i ? " " : "") + px + "," + py;
    if (c.markers || pts.size() == 1) marks += "<circle cx=\"" + px + "\" cy=\"" + py + "\" r=\"3.5\" fill=\"" + color + "\"/>\n";
  }
  return poly + "\"/>\n" + marks;
}

// The opening tag and the white background of a w x h document.
std::string SvgOpen(int width, int height) {
  const std::string w = std::to_string(width), h = std::to_string(height);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " +
         h + "\" font-family=\"sans-serif\" font-size=\"12\">\n" + "<rect width=\"" + w + "\" height=\"" + h +
         "\" fill=\"white\"/>\n";
}

// ---- bar charts ----

constexpr int kBarRight = 24;                                                   // no legend on the right
constexpr double kBarLabelFont = 11, kBarCharWidth = 6.5, kBarLabelPitch = 13;  // estimates for sans-serif 11

// At most max_chars bytes, cut before a UTF-8 continuation byte so the text stays valid.
std::string CutLabel(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars || max_chars < 4) return s;
  size_t end = max_chars - 3;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "...";
}

std::string Decimals(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 9), v);
  return buf;
}

// x labels of a bar chart: side by side when the widest fits its slot, else rotated, thinned
// to every m-th so that neighbours do not overlap; rotated labels make the document taller.
struct XLabels {
  std::vector<std::string> labels;
  bool rotated = false;
  size_t every = 1;
  double room = 16;    // pixels below the x axis taken by the labels
  int doc_height = 0;  // the document's height with them
};

XLabels LayoutXLabels(const std::vector<std::string>& raw, size_t max_chars, double slot, int height) {
  XLabels x;
  double widest = 0;
  for (const std::string& l : raw) {
    x.labels.push_back(CutLabel(l, max_chars));
    widest = std::max(widest, x.labels.back().size() * kBarCharWidth);
  }
  x.rotated = widest > slot - 4;
  x.every = x.rotated ? static_cast<size_t>(std::ceil(kBarLabelPitch / std::max(slot, 1e-9))) : 1;
  x.room = x.rotated ? widest + 10 : 16;
  x.doc_height = height + static_cast<int>(std::ceil(std::max(0.0, x.room - 16)));
  return x;
}

std::string XLabel(const std::string& label, bool rotated, double cx, double bottom) {
  if (!rotated) return Text(cx, bottom + 16, "middle", label, " font-size=\"11\"");
  const double x = cx + kBarLabelFont / 3, y = bottom + 8;  // the baseline sits right of the glyphs
  return Text(x, y, "end", label, " font-size=\"11\" transform=\"rotate(-90 " + Coord(x) + " " + Coord(y) + ")\"");
}

// The y axis of a bar chart: from 0 (or the lowest value) to y_max or the highest value.
Axis BarYAxis(double lo, double hi, double bottom, double top) {
  const std::vector<double> t = NiceTicks(lo, hi, 6);
  const double step = t.size() > 1 ? t[1] - t[0] : 1;
  Axis ya;
  for (double v : t) ya.ticks.emplace_back(v, TickLabel(v, step));
  ya.lo = t.front(), ya.hi = t.back(), ya.p0 = bottom, ya.p1 = top;
  return ya;
}

}  // namespace

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, int max_ticks) {
  if (!(hi > lo)) {  // one value (or none): widen so the axis still has a span
    const double pad = lo == 0 ? 1 : std::fabs(lo) / 2;
    lo = lo == 0 ? 0 : lo - pad, hi = hi + pad;
  }
  const double raw = (hi - lo) / std::max(1, max_ticks - 1);
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  std::vector<double> ticks;
  const long long k0 = std::llround(std::floor(lo / step + 1e-9)), k1 = std::llround(std::ceil(hi / step - 1e-9));
  for (long long k = k0; k <= k1; ++k) ticks.push_back(k == 0 ? 0.0 : k * step);  // no "-0"
  return ticks;
}

std::string RenderSvg(const LineChart& c) {
  const Axis xa = MakeXAxis(c), ya = MakeYAxis(c);
  std::string out = SvgOpen(c.width, c.height);
  out += Text(c.width / 2.0, 24, "middle", c.title, " font-size=\"15\"");
  out += Axes(c, xa, ya);
  bool any = false;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    out += Series(c, xa, ya, c.series[i], color);
    const double ly = kTop + 10 + 20.0 * i, lx = xa.p1 + 16;
    out += Line(lx, ly, lx + 22, ly, "stroke=\"" + std::string(color) + "\" stroke-width=\"2\"");
    out += Text(lx + 28, ly + 4, "start", c.series[i].label);
    any = any || !c.series[i].points.empty();
  }
  if (!any) out += Text((xa.p0 + xa.p1) / 2, (ya.p0 + ya.p1) / 2, "middle", "no data");
  return out + "</svg>\n";
}

std::string RenderBarSvg(const BarChart& c) {
  const size_t n = c.bars.size();
  const double left = kLeft, right = c.width - kBarRight, top = kTop, bottom = c.height - kBottom;
  const double slot = n ? (right - left) / n : right - left;

  // y: from 0 (or the lowest value) to the top the caller fixed, or the highest value.
  double lo = 0, hi = c.y_max;
  for (const Bar& b : c.bars)
    if (std::isfinite(b.value)) lo = std::min(lo, b.value), hi = std::max(hi, b.value);
  const Axis ya = BarYAxis(lo, hi, bottom, top);

  std::vector<std::string> raw;
  for (const Bar& b : c.bars) raw.push_back(b.label);
  const XLabels xl = LayoutXLabels(raw, c.max_label_chars, slot, c.height);

  std::string out = SvgOpen(c.width, xl.doc_height);
  out += Text(c.width / 2.0, 24, "middle", c.title, " font-size=\"15\"");
  for (const auto& [v, label] : ya.ticks) {
    out += Line(left, ya.Map(v), right, ya.Map(v), "stroke=\"#e0e0e0\"");
    out += Text(left - 6, ya.Map(v) + 4, "end", label);
  }
  const double zero = ya.Map(0), bar_w = std::max(1.0, slot * 0.8);
  for (size_t i = 0; i < n; ++i) {
    const Bar& b = c.bars[i];
    const double cx = left + slot * (i + 0.5);
    if (std::isfinite(b.value)) {
      const double y = ya.Map(b.value);
      const std::string tip = b.tooltip.empty() ? b.label + ": " + Decimals(b.value, c.value_decimals) : b.tooltip;
      out += "<rect x=\"" + Coord(cx - bar_w / 2) + "\" y=\"" + Coord(std::min(y, zero)) + "\" width=\"" +
             Coord(bar_w) + "\" height=\"" + Coord(std::fabs(zero - y)) + "\" fill=\"" + kColors[0] + "\"><title>" +
             XmlEscape(tip) + "</title></rect>\n";
      const std::string value = Decimals(b.value, c.value_decimals);
      if (value.size() * kBarCharWidth <= slot - 2) {
        out += Text(cx, b.value >= 0 ? y - 4 : y + 14, "middle", value, " font-size=\"11\"");
      }
    }
    if (i % xl.every == 0) out += XLabel(xl.labels[i], xl.rotated, cx, bottom);
  }
  out += Line(left, bottom, right, bottom, "stroke=\"black\"");
  out += Line(left, top, left, bottom, "stroke=\"black\"");
  out += Text((left + right) / 2, bottom + xl.room + 22, "middle", c.x_label);
  out += "<text transform=\"translate(18," + Coord((top + bottom) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         XmlEscape(c.y_label) + "</text>\n";
  if (n == 0) out += Text((left + right) / 2, (top + bottom) / 2, "middle", "no data");
  return out + "</svg>\n";
}

std::string RenderGroupedBarSvg(const GroupedBarChart& c) {
  const size_t n = c.categories.size(), m = std::max<size_t>(1, c.series.size());
  const double left = kLeft, right = c.width - kRight, top = kTop, bottom = c.height - kBottom;
  const double slot = n ? (right - left) / n : right - left;
  double lo = 0, hi = c.y_max;
  for (const BarSeries& s : c.series)
    for (double v : s.values)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  const Axis ya = BarYAxis(lo, hi, bottom, top);
  const XLabels xl = LayoutXLabels(c.categories, c.max_label_chars, slot, c.height);

  std::string out = SvgOpen(c.width, xl.doc_height);
  out += Text(c.width / 2.0, 24, "middle", c.title, " font-size=\"15\"");
  for (const auto& [v, label] : ya.ticks) {
    out += Line(left, ya.Map(v), right, ya.Map(v), "stroke=\"#e0e0e0\"");
    out += Text(left - 6, ya.Map(v) + 4, "end", label);
  }
  const double zero = ya.Map(0), group_w = slot * 0.8, bar_w = std::max(0.5, group_w / m);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    const double cx = left + slot * (i + 0.5);
    for (size_t k = 0; k < c.series.size(); ++k) {
      const BarSeries& s = c.series[k];
      if (i >= s.values.size() || !std::isfinite(s.values[i])) continue;
      any = true;
      const double y = ya.Map(s.values[i]), x = cx - group_w / 2 + bar_w * k;
      const std::string tip = s.label + ", " + c.categories[i] + ": " + Decimals(s.values[i], c.value_decimals);
      out += "<rect x=\"" + Coord(x) + "\" y=\"" + Coord(std::min(y, zero)) + "\" width=\"" + Coord(bar_w) +
             "\" height=\"" + Coord(std::fabs(zero - y)) + "\" fill=\"" + kColors[k % std::size(kColors)] +
             "\"><title>" + XmlEscape(tip) + "</title></rect>\n";
    }
    if (i % xl.every == 0) out += XLabel(xl.labels[i], xl.rotated, cx, bottom);
  }
  for (size_t k = 0; k < c.series.size(); ++k) {  // the legend, right of the plot
    const double ly = kTop + 10 + 20.0 * k, lx = right + 16;
    out += "<rect x=\"" + Coord(lx) + "\" y=\"" + Coord(ly - 6) + "\" width=\"12\" height=\"12\" fill=\"" +
           kColors[k % std::size(kColors)] + "\"/>\n";
    out += Text(lx + 18, ly + 4, "start", c.series[k].label);
  }
  out += Line(left, bottom, right, bottom, "stroke=\"black\"");
  out += Line(left, top, left, bottom, "stroke=\"black\"");
  out += Text((left + right) / 2, bottom + xl.room + 22, "middle", c.x_label);
  out += "<text transform=\"translate(18," + Coord((top + bottom) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         XmlEscape(c.y_label) + "</text>\n";
  if (!any) out += Text((left + right) / 2, (top + bottom) / 2, "middle", "no data");
  return out + "</svg>\n";
}

}  // namespace gk::plot
