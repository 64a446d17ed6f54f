#include "tools/bench_serve/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "tools/plot/svg_plot.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::bench {
namespace {

using nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Kind { kPoint, kSweep };
enum class Better { kHigher, kLower };
enum class Format { kFixed2, kCount };

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "4 req/s", "0.5 req/s", "inf (burst)": rates in headings and row names.
std::string RateText(double r) { return std::isinf(r) ? "inf (burst)" : Fmt("%g", r) + " req/s"; }

// 4 from the command line and 4.0000000001 from a float sum in a file are the same rate; inf is only inf.
bool SameRate(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

// A label inside a Markdown table cell or heading: '|' would end the cell.
std::string MdEscape(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? "\\|" : ch == '\n' ? " " : std::string(1, ch);
  return out;
}

// request_rate as vLLM writes it: a number, or the string "inf" for burst.
std::optional<double> ParseRate(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string() && (v == "inf" || v == "Infinity")) return kInf;
  return std::nullopt;
}

// The kind of a parsed file, or why it is neither (the caller prefixes the file or label).
Result<Kind> KindOf(const json& doc) {
  if (!doc.is_object()) return Result<Kind>::Error("is not a JSON object");
  if (doc.contains("gemmakit_sweep")) {
    if (doc["gemmakit_sweep"] != 1) {
      return Result<Kind>::Error(
          StrCat("has \"gemmakit_sweep\": ", doc["gemmakit_sweep"].dump(), "; only version 1 is known"));
    }
    if (!doc.contains("points") || !doc["points"].is_array()) {
      return Result<Kind>::Error("is a sweep summary without a \"points\" array");
    }
    if (!doc.contains("summary") || !doc["summary"].is_array()) {
      return Result<Kind>::Error("is a sweep summary without a \"summary\" array");
    }
    return Kind::kSweep;
  }
  if (doc.contains("request_rate")) return Kind::kPoint;
  return Result<Kind>::Error(
      "is neither a point result (no \"request_rate\") nor a sweep summary (no \"gemmakit_sweep\": 1)");
}

std::string Who(const CompareInput& in) { return StrCat("input \"", in.label, "\""); }

Result<Kind> CheckInputs(const std::vector<CompareInput>& inputs) {
  if (inputs.size() < 2) {
    return Result<Kind>::Error(StrCat("bench compare needs at least two inputs, got ", inputs.size()));
  }
  std::vector<Kind> kinds;
  for (const CompareInput& in : inputs) {
    Result<Kind> k = KindOf(in.doc);
    if (!k.ok()) return Result<Kind>::Error(StrCat(Who(in), " ", k.message()));
    kinds.push_back(*k);
  }
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (kinds[i] == kinds[0]) continue;
    auto name = [](Kind k) { return k == Kind::kPoint ? "a point result" : "a sweep summary"; };
    return Result<Kind>::Error(StrCat("inputs are of different kinds: ", Who(inputs[0]), " is ", name(kinds[0]), ", ",
                                      Who(inputs[i]), " is ", name(kinds[i]),
                                      "; compare point results with point results and sweeps with sweeps"));
  }
  return kinds[0];
}

// A numeric field: absent or null -> nullopt; anything else but a number is an error.
Result<std::optional<double>> Number(const json& obj, const std::string& key, const std::string& where) {
  using R = Result<std::optional<double>>;
  if (!obj.contains(key) || obj[key].is_null()) return R(std::optional<double>());
  if (!obj[key].is_number())
    return R::Error(StrCat(where, ": \"", key, "\" is ", obj[key].dump(), ", expected a number"));
  return R(std::optional<double>(obj[key].get<double>()));
}

// ---- tables ----

struct Row {
  std::string name;
  std::vector<double> values;  // one per input; +inf shows as inf_text
  Better better = Better::kHigher;
  Format format = Format::kFixed2;
  bool zero_is_no_data = false;  // latencies: 0 means no successful request, not "instant"
  std::string inf_text = "inf";
};

std::string Cell(const Row& r, double v) {
  if (std::isinf(v)) return r.inf_text;
  return Fmt(r.format == Format::kCount ? "%.0f" : "%.2f", v);
}

// (winner, ratio): ratio = better / worse >= 1, "=" when all equal, "-" when a value is 0 or
// unbounded (no finite ratio); winner "-" when nothing is better.
std::pair<std::string, std::string> Judge(const Row& r, const std::vector<std::string>& labels) {
  const std::vector<double>& v = r.values;
  if (std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; })) return {"-", "="};
  std::vector<size_t> cand;
  for (size_t i = 0; i < v.size(); ++i)
    if (!(r.zero_is_no_data && v[i] == 0)) cand.push_back(i);
  if (cand.size() < 2) return {"-", "-"};
  auto better = [&](double a, double b) { return r.better == Better::kHigher ? a > b : a < b; };
  double best = v[cand[0]], worst = v[cand[0]];
  for (size_t i : cand) {
    if (better(v[i], best)) best = v[i];
    if (better(worst, v[i])) worst = v[i];
  }
  if (best == worst) return {"-", "-"};  // equal apart from inputs without data
  std::string winner;
  for (size_t i : cand)
    if (v[i] == best) winner += (winner.empty() ? "" : ", ") + MdEscape(labels[i]);
  const bool bounded = std::none_of(v.begin(), v.end(), [](double x) { return x == 0 || std::isinf(x); });
  if (!bounded) return {winner, "-"};
  const double ratio = r.better == Better::kHigher ? best / worst : worst / best;
  return {winner, Fmt("%.2fx", ratio)};
}

std::string Table(const std::vector<Row>& rows, const std::vector<std::string>& labels) {
  if (rows.empty()) return "_No metric is present in every input._\n";
  std::string out = "| metric |", rule = "|---|";
  for (const std::string& l : labels) out += " " + MdEscape(l) + " |", rule += "---:|";
  out += " winner | ratio |\n" + rule + "---|---:|\n";
  for (const Row& r : rows) {
    out += "| " + r.name + " |";
    for (double v : r.values) out += " " + Cell(r, v) + " |";
    const auto [winner, ratio] = Judge(r, labels);
    out += " " + winner + " | " + ratio + " |\n";
  }
  return out;
}

std::vector<std::string> Labels(const std::vector<CompareInput>& inputs) {
  std::vector<std::string> out;
  for (const CompareInput& in : inputs) out.push_back(in.label);
  return out;
}

std::string Heading(const std::vector<std::string>& labels) {
  std::string out = "## ";
  for (size_t i = 0; i < labels.size(); ++i) out += (i ? " vs " : "") + MdEscape(labels[i]);
  return out;
}

struct MetricDef {
  const char* name;
  const char* key;
  Better better;
  Format format;
};

constexpr MetricDef kPointMetrics[] = {
    {"output throughput (tok/s)", "output_throughput", Better::kHigher, Format::kFixed2},
    {"peak output throughput (tok/s)", "max_output_tokens_per_s", Better::kHigher, Format::kFixed2},
    {"total throughput (tok/s)", "total_token_throughput", Better::kHigher, Format::kFixed2},
    {"request throughput (req/s)", "request_throughput", Better::kHigher, Format::kFixed2},
    {"request goodput (req/s)", "request_goodput", Better::kHigher, Format::kFixed2},
    {"median TTFT (ms)", "median_ttft_ms", Better::kLower, Format::kFixed2},
    {"P99 TTFT (ms)", "p99_ttft_ms", Better::kLower, Format::kFixed2},
    {"median TPOT (ms)", "median_tpot_ms", Better::kLower, Format::kFixed2},
    {"P99 TPOT (ms)", "p99_tpot_ms", Better::kLower, Format::kFixed2},
    {"median ITL (ms)", "median_itl_ms", Better::kLower, Format::kFixed2},
    {"P99 ITL (ms)", "p99_itl_ms", Better::kLower, Format::kFixed2},
    {"median E2EL (ms)", "median_e2el_ms", Better::kLower, Format::kFixed2},
    {"P99 E2EL (ms)", "p99_e2el_ms", Better::kLower, Format::kFixed2},
    {"completed", "completed", Better::kHigher, Format::kCount},
    {"failed", "failed", Better::kLower, Format::kCount},
};

// The row of `def` over one object per input, or nullopt when some input lacks the field.
Result<std::optional<Row>> MetricRow(const MetricDef& def, const std::string& name,
                                     const std::vector<const json*>& objs, const std::vector<std::string>& where) {
  using R = Result<std::optional<Row>>;
  Row row{name, {}, def.better, def.format, def.better == Better::kLower && def.format == Format::kFixed2};
  for (size_t i = 0; i < objs.size(); ++i) {
    GK_ASSIGN_OR_RETURN(std::optional<double> v, Number(*objs[i], def.key, where[i]));
    if (!v) return R(std::optional<Row>());
    row.values.push_back(*v);
  }
  return R(std::optional<Row>(std::move(row)));
}

Result<std::string> PointMarkdown(const std::vector<CompareInput>& inputs) {
  const std::vector<std::string> labels = Labels(inputs);
  std::vector<const json*> docs;
  std::vector<std::string> where;
  std::vector<double> rates;
  for (const CompareInput& in : inputs) {
    const std::optional<double> r = ParseRate(in.doc["request_rate"]);
    if (!r) {
      return Result<std::string>::Error(
          StrCat(Who(in), ": \"request_rate\" is ", in.doc["request_rate"].dump(), ", expected a number or \"inf\""));
    }
    rates.push_back(*r), docs.push_back(&in.doc), where.push_back(Who(in));
  }
  std::vector<Row> rows;
  for (const MetricDef& def : kPointMetrics) {
    GK_ASSIGN_OR_RETURN(std::optional<Row> row, MetricRow(def, def.name, docs, where));
    if (row) rows.push_back(std::move(*row));
  }
  std::string out = Heading(labels) + ": point results at request rate";
  if (std::all_of(rates.begin(), rates.end(), [&](double r) { return SameRate(r, rates[0]); })) {
    out += " " + RateText(rates[0]);
  } else {
    for (size_t i = 0; i < rates.size(); ++i)
      out += (i ? ", " : "s ") + RateText(rates[i]) + " (" + MdEscape(labels[i]) + ")";
  }
  return out + "\n\n" + Table(rows, labels);
}

// ---- sweeps ----

struct SweepPoint {
  long long input_len;
  double rate;
  const json* fields;
};

struct Sweep {
  std::vector<SweepPoint> points;
  std::map<long long, const json*> summary;  // by input_len
  std::set<long long> lengths;               // of points and summary entries
};

Result<long long> InputLen(const json& e, const std::string& where) {
  if (!e.is_object() || !e.contains("input_len") || !e["input_len"].is_number_integer()) {
    return Result<long long>::Error(StrCat(where, ".input_len is missing or not an integer"));
  }
  return e["input_len"].get<long long>();
}

Result<Sweep> ParseSweep(const CompareInput& in) {
  Sweep s;
  const json& points = in.doc["points"];
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string where = StrCat(Who(in), ": points[", i, "]");
    GK_ASSIGN_OR_RETURN(long long len, InputLen(points[i], where));
    const std::optional<double> rate =
        points[i].contains("request_rate") ? ParseRate(points[i]["request_rate"]) : std::nullopt;
    if (!rate) return Result<Sweep>::Error(StrCat(where, ".request_rate is missing or not a number or \"inf\""));
    s.points.push_back({len, *rate, &points[i]}), s.lengths.insert(len);
  }
  const json& summary = in.doc["summary"];
  for (size_t i = 0; i < summary.size(); ++i) {
    GK_ASSIGN_OR_RETURN(long long len, InputLen(summary[i], StrCat(Who(in), ": summary[", i, "]")));
    s.summary.emplace(len, &summary[i]), s.lengths.insert(len);
  }
  return s;
}

Result<std::vector<Sweep>> ParseSweeps(const std::vector<CompareInput>& inputs) {
  std::vector<Sweep> out;
  for (const CompareInput& in : inputs) {
    GK_ASSIGN_OR_RETURN(Sweep s, ParseSweep(in));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<double> RatesAt(const Sweep& s, long long len) {
  std::vector<double> out;
  for (const SweepPoint& p : s.points)
    if (p.input_len == len) out.push_back(p.rate);
  std::sort(out.begin(), out.end());
  return out;
}

const json* PointAt(const Sweep& s, long long len, double rate) {
  for (const SweepPoint& p : s.points)
    if (p.input_len == len && SameRate(p.rate, rate)) return p.fields;
  return nullptr;
}

std::string RateList(const std::vector<double>& rates) {
  if (rates.empty()) return "no points";
  std::string out;
  for (double r : rates) out += (out.empty() ? "" : ", ") + (std::isinf(r) ? std::string("inf") : Fmt("%g", r));
  return out;
}

// The rate whose latencies are compared for one input length: options.at_rate, else the lowest
// rate every input has.
Result<double> ComparedRate(const std::vector<CompareInput>& inputs, const std::vector<Sweep>& sweeps, long long len,
                            const CompareOptions& options) {
  std::string have;
  for (size_t i = 0; i < sweeps.size(); ++i)
    have += StrCat(i ? "; " : "", inputs[i].label, ": ", RateList(RatesAt(sweeps[i], len)));
  if (options.at_rate) {
    for (const Sweep& s : sweeps) {
      if (!PointAt(s, len, *options.at_rate)) {
        return Result<double>::Error(StrCat("request rate ", RateText(*options.at_rate),
                                            " is not in every input for input length ", len, " (", have, ")"));
      }
    }
    return *options.at_rate;
  }
  for (double r : RatesAt(sweeps[0], len)) {
    if (std::all_of(sweeps.begin(), sweeps.end(), [&](const Sweep& s) { return PointAt(s, len, r) != nullptr; }))
      return r;
  }
  return Result<double>::Error(StrCat("no request rate is in every input for input length ", len, " (", have, ")"));
}

// best / peak / saturation rows from the summary entries, when every input has one for len.
Result<std::vector<Row>> SummaryRows(const std::vector<CompareInput>& inputs, const std::vector<Sweep>& sweeps,
                                     long long len) {
  std::vector<Row> rows;
  std::vector<const json*> objs;
  std::vector<std::string> where;
  for (size_t i = 0; i < sweeps.size(); ++i) {
    auto it = sweeps[i].summary.find(len);
    if (it == sweeps[i].summary.end()) return rows;
    objs.push_back(it->second), where.push_back(StrCat(Who(inputs[i]), ": summary for input length ", len));
  }
  const MetricDef defs[] = {
      {"best output throughput (tok/s)", "best_output_throughput", Better::kHigher, Format::kFixed2},
      {"peak output throughput (tok/s)", "peak_output_tokens_per_s", Better::kHigher, Format::kFixed2}};
  for (const MetricDef& def : defs) {
    GK_ASSIGN_OR_RETURN(std::optional<Row> row, MetricRow(def, def.name, objs, where));
    if (row) rows.push_back(std::move(*row));
  }
  // Saturation: null means the sweep never saturated, which beats any rate.
  Row sat{"saturation request rate (req/s)", {}, Better::kHigher, Format::kFixed2, false, "not reached"};
  for (size_t i = 0; i < objs.size(); ++i) {
    if (!objs[i]->contains("saturation_request_rate")) return rows;
    GK_ASSIGN_OR_RETURN(std::optional<double> v, Number(*objs[i], "saturation_request_rate", where[i]));
    sat.values.push_back(v ? *v : kInf);
  }
  rows.push_back(std::move(sat));
  return rows;
}

Result<std::string> SweepSection(const std::vector<CompareInput>& inputs, const std::vector<Sweep>& sweeps,
                                 long long len, const CompareOptions& options) {
  GK_ASSIGN_OR_RETURN(std::vector<Row> rows, SummaryRows(inputs, sweeps, len));
  GK_ASSIGN_OR_RETURN(double rate, ComparedRate(inputs, sweeps, len, options));
  std::vector<const json*> objs;
  std::vector<std::string> where;
  for (size_t i = 0; i < sweeps.size(); ++i) {
    objs.push_back(PointAt(sweeps[i], len, rate));
    where.push_back(StrCat(Who(inputs[i]), ": point at input length ", len, ", ", RateText(rate)));
  }
  const MetricDef defs[] = {{"median TTFT", "median_ttft_ms", Better::kLower, Format::kFixed2},
                            {"median TPOT", "median_tpot_ms", Better::kLower, Format::kFixed2},
                            {"P99 ITL", "p99_itl_ms", Better::kLower, Format::kFixed2}};
  for (const MetricDef& def : defs) {
    GK_ASSIGN_OR_RETURN(std::optional<Row> row,
                        MetricRow(def, StrCat(def.name, " @ ", RateText(rate), " (ms)"), objs, where));
    if (row) rows.push_back(std::move(*row));
  }
  return StrCat("### input ", len, " tokens\n\n", Table(rows, Labels(inputs)));
}

std::vector<long long> CommonLengths(const std::vector<Sweep>& sweeps) {
  std::vector<long long> out;
  for (long long len : sweeps[0].lengths) {
    if (std::all_of(sweeps.begin(), sweeps.end(), [&](const Sweep& s) { return s.lengths.count(len) > 0; })) {
      out.push_back(len);
    }
  }
  return out;
}

Result<std::string> SweepMarkdown(const std::vector<CompareInput>& inputs, const CompareOptions& options) {
  GK_ASSIGN_OR_RETURN(std::vector<Sweep> sweeps, ParseSweeps(inputs));
  const std::vector<long long> lengths = CommonLengths(sweeps);
  if (lengths.empty()) {
    std::string have;
    for (size_t i = 0; i < sweeps.size(); ++i) {
      have += StrCat(i ? "; " : "", inputs[i].label, ":");
      for (long long len : sweeps[i].lengths) have += StrCat(" ", len);
    }
    return Result<std::string>::Error(StrCat("no input length is in every sweep (", have, ")"));
  }
  std::string out = Heading(Labels(inputs)) + ": sweep summaries, latencies at " +
                    (options.at_rate ? RateText(*options.at_rate) : "the lowest request rate every input has") + "\n";
  for (long long len : lengths) {
    GK_ASSIGN_OR_RETURN(std::string section, SweepSection(inputs, sweeps, len, options));
    out += "\n" + section;
  }
  return out;
}

// ---- plots ----

std::pair<std::string, std::string> Plot(const std::string& file, const std::string& title, const std::string& y_label,
                                         std::vector<plot::PlotSeries> series) {
  plot::LineChart c;
  c.title = title, c.x_label = "request rate (req/s)", c.y_label = y_label, c.log2_x = true;
  c.series = std::move(series);
  return {file, plot::RenderSvg(c)};
}

// (rate, value of key) for each object that has the key as a number.
void AddPoint(plot::PlotSeries& s, double rate, const json& obj, const char* key) {
  if (obj.contains(key) && obj[key].is_number()) s.points.emplace_back(rate, obj[key].get<double>());
}

Result<std::vector<std::pair<std::string, std::string>>> ComparePlotsUnguarded(const std::vector<CompareInput>& inputs) {
  using Plots = std::vector<std::pair<std::string, std::string>>;
  GK_ASSIGN_OR_RETURN(Kind kind, CheckInputs(inputs));
  Plots out;
  if (kind == Kind::kPoint) {
    std::vector<plot::PlotSeries> tput, ttft;
    for (const CompareInput& in : inputs) {
      tput.push_back({in.label, {}}), ttft.push_back({in.label, {}});
      const std::optional<double> rate = ParseRate(in.doc["request_rate"]);
      if (!rate) return Result<Plots>::Error(StrCat(Who(in), ": \"request_rate\" is not a number or \"inf\""));
      AddPoint(tput.back(), *rate, in.doc, "output_throughput");
      AddPoint(ttft.back(), *rate, in.doc, "median_ttft_ms");
    }
    out.push_back(
        Plot("throughput_vs_rate.svg", "Output throughput vs request rate", "output throughput (tok/s)", tput));
    out.push_back(Plot("ttft_vs_rate.svg", "Median TTFT vs request rate", "median TTFT (ms)", ttft));
    return out;
  }
  GK_ASSIGN_OR_RETURN(std::vector<Sweep> sweeps, ParseSweeps(inputs));
  std::set<long long> lengths;  // every length: a plot may show a line for only some inputs
  for (const Sweep& s : sweeps) lengths.insert(s.lengths.begin(), s.lengths.end());
  for (long long len : lengths) {
    std::vector<plot::PlotSeries> tput, ttft;
    for (size_t i = 0; i < inputs.size(); ++i) {
      tput.push_back({inputs[i].label, {}}), ttft.push_back({inputs[i].label, {}});
      for (const SweepPoint& p : sweeps[i].points) {
        if (p.input_len != len) continue;
        AddPoint(tput.back(), p.rate, *p.fields, "output_throughput");
        AddPoint(ttft.back(), p.rate, *p.fields, "median_ttft_ms");
      }
    }
    const std::string suffix = StrCat(" (input ", len, " tokens)"), in = StrCat("_in", len, ".svg");
    out.push_back(Plot("throughput_vs_rate" + in, "Output throughput vs request rate" + suffix,
                       "output throughput (tok/s)", tput));
    out.push_back(Plot("ttft_vs_rate" + in, "Median TTFT vs request rate" + suffix, "median TTFT (ms)", ttft));
  }
  return out;
}

}  // namespace

// The inputs are JSON files from outside: whatever reading them throws (a field of an
// unexpected type) is an error, not an abort (util/guarded_parse.h).
Result<std::string> CompareMarkdown(const std::vector<CompareInput>& inputs, const CompareOptions& options) {
  return GuardedParse("bench compare", [&]() -> Result<std::string> {
    GK_ASSIGN_OR_RETURN(Kind kind, CheckInputs(inputs));
    return kind == Kind::kPoint ? PointMarkdown(inputs) : SweepMarkdown(inputs, options);
  });
}

Result<std::vector<std::pair<std::string, std::string>>> ComparePlots(const std::vector<CompareInput>& inputs) {
  return GuardedParse("bench compare", [&] { return ComparePlotsUnguarded(inputs); });
}

Result<CompareInput> LoadCompareInput(const std::string& path, const std::string& label) {
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  CompareInput in;
  in.label = label.empty() ? std::filesystem::path(path).stem().string() : label;
  GK_ASSIGN_OR_RETURN(in.doc, ParseJson(text, path));
  Result<Kind> kind = KindOf(in.doc);
  if (!kind.ok()) return Result<CompareInput>::Error(StrCat(path, " ", kind.message()));
  return in;
}

}  // namespace gk::bench
