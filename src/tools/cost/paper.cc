#include "tools/cost/paper.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/cost/cost_model.h"
#include "util/result.h"

namespace gk::cost {
namespace {

// The report's inputs (FACTS.md §2, §3, §5), nothing derived.
constexpr double kTpuTrainPrice = 16.80, kTpuServePrice = 21.52, kGpuPrice = 22.12;
constexpr double kTpuHours = 3.34, kGpuHours = 5.39;
constexpr double kTpuTrainTokS = 763, kGpuTrainTokS = 486;
constexpr int kTpuSamples = 1244 * 8, kGpuSamples = 1250 * 8;  // optimizer steps × effective batch
constexpr double kTpuShortTokS = 1403, kGpuShortTokS = 1490;   // 512 in / 256 out, burst: peak output tok/s
constexpr double kTpu4kTokS = 1206, kGpu4kTokS = 728;          // 4096 in / 512 out

std::string Fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}
std::string Millions(double x) { return Fmt("%.2fM", x / 1e6); }
std::string Ratio(double x) { return Fmt("%.2f×", x); }
// The report's rounding of a count to 0.01M (how it prints tok/h) or 0.1M.
double RoundTo(double x, double unit) { return std::round(x / unit) * unit; }

// The inputs that round to a printed "$X.YZ" per 1M: numerator / ($X.YZ ± half a cent).
std::string DenominatorRangeFor(const std::string& dollars, double numerator, const char* what, double scale,
                                const char* format, const char* unit) {
  const double x = std::stod(dollars.substr(1));
  const double lo = numerator / (x + 0.005) * 1e6 / scale, hi = numerator / (x - 0.005) * 1e6 / scale;
  return StrCat(dollars, " needs ", what, " in ", Fmt(format, lo), "–", Fmt(format, hi), unit);
}

// Pads to a display width: UTF-8 continuation bytes take no column ("×", "§").
std::string Pad(const std::string& s, size_t width, bool right) {
  size_t cols = 0;
  for (unsigned char ch : s) cols += (ch & 0xC0) != 0x80;
  const std::string fill(cols < width ? width - cols : 0, ' ');
  return right ? fill + s : s + fill;
}

void Training(std::vector<PaperFigure>& f) {
  struct Run {
    const char* name;
    double hours, tok_s, price;
    int samples;
    const char *cost, *per_m, *per_sample;
  };
  const Run runs[] = {{"TPU v5p-8", kTpuHours, kTpuTrainTokS, kTpuTrainPrice, kTpuSamples, "$56.11", "$6.10", "1.21 s"},
                      {"GPU 2×H100", kGpuHours, kGpuTrainTokS, kGpuPrice, kGpuSamples, "$119.23", "$12.68", "1.94 s"}};
  for (const Run& r : runs) {
    const double tokens = r.tok_s * r.hours * 3600;
    const TrainingCost c = TrainingCostOf(r.hours, tokens, r.price);
    f.push_back({"§3 training", StrCat(r.name, " total cost"), StrCat(Fmt("%.2f", r.hours), " h × ", Dollars(r.price), "/h"),
                 Dollars(c.cost), r.cost, ""});
    f.push_back({"§3 training", StrCat(r.name, " time per sample"),
                 StrCat(Fmt("%.2f", r.hours), " h / ", r.samples, " samples (optimizer steps × batch 8)"),
                 Fmt("%.2f s", r.hours * 3600 / r.samples), r.per_sample, ""});
    f.push_back({"§3 training", StrCat(r.name, " tokens trained"),
                 StrCat(Fmt("%.0f", r.tok_s), " tok/s × ", Fmt("%.2f", r.hours), " h"), Millions(tokens),
                 r.tok_s == kTpuTrainTokS ? "9.17M" : "", ""});
    PaperFigure per_m{"§3 training", StrCat(r.name, " cost per 1M tokens trained"),
                      StrCat(Dollars(c.cost), " / ", Millions(tokens), " tokens"), Dollars(c.cost_per_m_tokens), r.per_m,
                      ""};
    if (!per_m.Matches()) {
      per_m.note = DenominatorRangeFor(r.per_m, c.cost, "tokens", 1e6, "%.3f", "M");
    }
    f.push_back(per_m);
    // The report's figure follows from the token count rounded to 0.1M.
    const double rounded = RoundTo(tokens, 1e5);
    f.push_back({"§3 training", StrCat(r.name, " cost per 1M tokens, tokens rounded"),
                 StrCat(Dollars(c.cost), " / ", Fmt("%.1fM", rounded / 1e6), " (tokens rounded to 0.1M)"),
                 Dollars(TrainingCostOf(r.hours, rounded, r.price).cost_per_m_tokens), r.per_m, ""});
  }
  const double tpu = kTpuHours * kTpuTrainPrice, gpu = kGpuHours * kGpuPrice;
  f.push_back({"§3 ratios", "TPU faster (wall-clock)", StrCat("5.39 h / 3.34 h (tok/s ratio 763/486 = ",
               Ratio(kTpuTrainTokS / kGpuTrainTokS), ")"), Ratio(kGpuHours / kTpuHours), "1.61×", ""});
  f.push_back({"§3 ratios", "TPU cheaper (training)", StrCat(Dollars(gpu), " / ", Dollars(tpu)), Ratio(gpu / tpu), "2.12×", ""});
}

void Serving(std::vector<PaperFigure>& f) {
  struct Row {
    const char *name, *workload;
    double tok_s, price;
    const char *tok_h, *per_m;
  };
  const Row rows[] = {{"TPU v6e-8", "short context (512 in / 256 out, burst)", kTpuShortTokS, kTpuServePrice, "5.05M", "$4.27"},
                      {"GPU 2×H100", "short context (512 in / 256 out, burst)", kGpuShortTokS, kGpuPrice, "5.36M", "$4.13"},
                      {"TPU v6e-8", "4096-token context (4096 in / 512 out)", kTpu4kTokS, kTpuServePrice, "4.34M", "$4.95"},
                      {"GPU 2×H100", "4096-token context (4096 in / 512 out)", kGpu4kTokS, kGpuPrice, "2.62M", "$8.44"}};
  for (const Row& r : rows) {
    const ServingCost c = ServingCostOf(r.workload, r.tok_s, r.price);
    f.push_back({"§6 serving", StrCat(r.name, " ", r.workload, " tok/h"), StrCat(Fmt("%.0f", r.tok_s), " peak output tok/s × 3600"),
                 Millions(c.tokens_per_hour), r.tok_h, ""});
    PaperFigure exact{"§6 serving", StrCat(r.name, " ", r.workload, " $/1M output"),
                      StrCat(Dollars(r.price), "/h / ", Fmt("%.4fM", c.tokens_per_hour / 1e6), " tok/h"),
                      Dollars(c.cost_per_m_output), r.per_m, ""};
    const double rounded = RoundTo(c.tokens_per_hour, 1e4);
    PaperFigure from_rounded{"§6 serving", StrCat(r.name, " ", r.workload, " $/1M output, tok/h rounded"),
                             StrCat(Dollars(r.price), "/h / ", Millions(rounded), " tok/h (as printed)"),
                             Dollars(r.price / (rounded / 1e6)), r.per_m, ""};
    if (!exact.Matches()) {
      exact.note = StrCat(DenominatorRangeFor(r.per_m, r.price, "output", 3600, "%.1f", " tok/s"), "; the report's throughput is ",
                          Fmt("%.0f", r.tok_s), " tok/s");
      if (!from_rounded.Matches()) {
        from_rounded.note = "no input of the report reproduces its figure: a one-cent error in the report";
      }
    }
    f.push_back(exact);
    if (!exact.Matches()) f.push_back(from_rounded);
  }
}

void Tco(std::vector<PaperFigure>& f) {
  const double tpu = kTpuHours * kTpuTrainPrice, gpu = kGpuHours * kGpuPrice;
  const std::vector<double> hours = {0, 1, 8, 24};
  const auto t = TcoRows(tpu, kTpuServePrice, hours), g = TcoRows(gpu, kGpuPrice, hours);
  const char* tpu_report[] = {"$56.11", "$77.63", "$228.27", "$572.59"};
  const char* gpu_report[] = {"$119.23", "$141.35", "$296.19", "$650.11"};
  for (size_t i = 0; i < hours.size(); ++i) {
    const std::string what = i == 0 ? "training" : StrCat("training + ", Fmt("%.0f", hours[i]), " h serving");
    f.push_back({"§6 TCO", StrCat("TPU ", what), StrCat(Dollars(tpu), " + ", Fmt("%.0f", hours[i]), " h × $21.52/h (v6e-8)"),
                 Dollars(t[i].cost), tpu_report[i], ""});
    f.push_back({"§6 TCO", StrCat("GPU ", what), StrCat(Dollars(gpu), " + ", Fmt("%.0f", hours[i]), " h × $22.12/h"),
                 Dollars(g[i].cost), gpu_report[i], ""});
  }
  // Which horizon a "cheaper end-to-end" ratio uses changes it from 1.82× to 1.14×.
  for (size_t i = 1; i < hours.size(); ++i) {
    f.push_back({"§6 ratios", StrCat("TPU cheaper, training + ", Fmt("%.0f", hours[i]), " h serving"),
                 StrCat(Dollars(g[i].cost), " / ", Dollars(t[i].cost), i == 1 ? " (the horizon of the report's 1.82×)" : ""),
                 Ratio(g[i].cost / t[i].cost), "", ""});
  }
  f.push_back({"§6 ratios", "report's claim: \"1.82× cheaper end-to-end\" (training + a day of serving)",
               StrCat(Dollars(g[3].cost), " / ", Dollars(t[3].cost), " (its own 24-hour row)"), Ratio(g[3].cost / t[3].cost),
               "1.82×",
               StrCat("the report's claim is inconsistent: 1.82× is the 1-hour horizon (", Dollars(g[1].cost), " / ",
                      Dollars(t[1].cost), "); a day of serving gives ", Ratio(g[3].cost / t[3].cost))});
}

}  // namespace

std::vector<PaperFigure> PaperFigures() {
  std::vector<PaperFigure> f;
  Training(f);
  Serving(f);
  Tco(f);
  return f;
}

std::string FormatPaperFigures(const std::vector<PaperFigure>& figures) {
  std::string out =
      "Reference case (FACTS.md §3, §6): each cost figure recomputed from the report's own inputs\n"
      "(measured hours and tok/s, on-demand $/h), beside the figure the report prints.\n"
      "ok = equal as printed; DIFFERS = not; '-' = the report prints no such figure.\n";
  std::string table;
  int differ = 0;
  for (const PaperFigure& p : figures) {
    if (p.table != table) {
      table = p.table;
      out += StrCat("\n", Pad(p.table, 80, false), Pad("computed", 10, true), Pad("report", 10, true), "  check\n");
    }
    const bool ok = p.Matches();
    differ += ok ? 0 : 1;
    out += StrCat("  ", Pad(p.label, 78, false), Pad(p.computed, 10, true), Pad(p.report.empty() ? "-" : p.report, 10, true),
                  "  ", p.report.empty() ? "-" : (ok ? "ok" : "DIFFERS"), "\n");
    out += StrCat("      = ", p.inputs, "\n");
    if (!p.note.empty()) out += StrCat("      ! ", p.note, "\n");
  }
  out += StrCat("\n", figures.size(), " figures, ", differ, " differ from the report as printed.\n");
  return out;
}

nlohmann::json PaperFiguresJson(const std::vector<PaperFigure>& figures) {
  nlohmann::json a = nlohmann::json::array();
  for (const PaperFigure& p : figures) {
    a.push_back({{"table", p.table}, {"label", p.label}, {"inputs", p.inputs}, {"computed", p.computed},
                 {"report", p.report.empty() ? nlohmann::json() : nlohmann::json(p.report)}, {"matches", p.Matches()},
                 {"note", p.note}});
  }
  return a;
}

}  // namespace gk::cost
