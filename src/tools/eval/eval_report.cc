#include "tools/eval/eval_report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <set>
#include <system_error>

#include "tools/eval/pass_at_k.h"
#include "tools/plot/svg_plot.h"

namespace gk::eval {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Summaries of two runs are read by the same code that writes them; these are its key names.
constexpr const char* kKeyPassAtK = "pass_at_k";
constexpr const char* kKeyAllPass = "problems_all_pass";
constexpr const char* kKeyNonePass = "problems_none_pass";
constexpr const char* kKeyProblemCount = "problem_count";
constexpr const char* kKeySamples = "samples";
constexpr const char* kKeyCategories = "categories";
constexpr const char* kKeyProblems = "problems";
constexpr size_t kMaxDiffRows = 20, kMaxOnlyNames = 10;

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "1 problem", "3 problems".
std::string Problems(long long n) { return StrCat(n, n == 1 ? " problem" : " problems"); }

double Percent(long long part, long long whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

// A label inside a Markdown table cell or heading: '|' would end the cell.
std::string MdEscape(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? "\\|" : ch == '\n' ? " " : std::string(1, ch);
  return out;
}

// The smallest per-problem n: pass@k is reported only for k up to it, so that every problem's
// estimate is defined and the mean is over the same problems for every k.
int MinN(const EvalSummary& s) {
  int m = 0;
  for (const ProblemResult& p : s.problems) m = m == 0 ? p.n : std::min(m, p.n);
  return m;
}

// "n = 5" or "n = 3..5": the per-problem sample counts, for titles.
std::string NText(const EvalSummary& s) {
  int lo = MinN(s), hi = 0;
  for (const ProblemResult& p : s.problems) hi = std::max(hi, p.n);
  return lo == hi ? StrCat("n = ", lo) : StrCat("n = ", lo, "..", hi);
}

// ---- reading a summary.json back (CompareEvalMarkdown) ----

struct ParsedSummary {
  std::map<int, double> pass_at_k;
  long long all_pass = 0, none_pass = 0, samples = 0;
  std::map<std::string, std::pair<long long, long long>> problems;  // name -> (n, c)
  const json* doc = nullptr;
};

// An integral JSON number (5 or 5.0), else nothing.
std::optional<long long> Integer(const json& v) {
  if (v.is_number_integer()) return v.get<long long>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<long long>(d);
  }
  return std::nullopt;
}

Result<ParsedSummary> ParseSummary(const json& doc, const std::string& label) {
  const std::string who = StrCat("summary \"", label, "\"");
  auto fail = [&](const std::string& why) { return Result<ParsedSummary>::Error(who + ": " + why); };
  if (!doc.is_object()) return fail("is not a JSON object (expected the summary.json of `gemmakit eval verilog`)");
  ParsedSummary out;
  out.doc = &doc;
  if (!doc.contains(kKeyPassAtK) || !doc[kKeyPassAtK].is_object()) {
    return fail(StrCat("\"", kKeyPassAtK,
                       "\" is missing or not an object (expected the summary.json of `gemmakit "
                       "eval verilog`)"));
  }
  for (const auto& [key, value] : doc[kKeyPassAtK].items()) {
    int k = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), k);
    if (ec != std::errc() || end != key.data() + key.size() || k < 1) {
      return fail(StrCat("\"", kKeyPassAtK, "\" key \"", key, "\" is not a positive integer k"));
    }
    if (!value.is_number())
      return fail(StrCat("\"", kKeyPassAtK, "\".\"", key, "\" is ", value.dump(), ", not a number"));
    out.pass_at_k[k] = value.get<double>();
  }
  for (auto [key, field] : {std::pair{kKeyAllPass, &out.all_pass}, std::pair{kKeyNonePass, &out.none_pass}}) {
    const std::optional<long long> v = doc.contains(key) ? Integer(doc[key]) : std::nullopt;
    if (!v) return fail(StrCat("\"", key, "\" is missing or not an integer"));
    *field = *v;
  }
  if (!doc.contains(kKeyProblems) || !doc[kKeyProblems].is_array()) {
    return fail(StrCat("\"", kKeyProblems, "\" is missing or not an array"));
  }
  const json& problems = doc[kKeyProblems];
  for (size_t i = 0; i < problems.size(); ++i) {
    const json& p = problems[i];
    const bool shaped = p.is_object() && p.contains("problem") && p["problem"].is_string() && p.contains("n") &&
                        p.contains("c") && Integer(p["n"]) && Integer(p["c"]);
    const long long n = shaped ? *Integer(p["n"]) : 0, c = shaped ? *Integer(p["c"]) : -1;
    if (!shaped || n < 1 || c < 0 || c > n) {
      return fail(StrCat("\"", kKeyProblems, "\"[", i,
                         "] needs \"problem\" (a string), \"n\" (an integer >= 1) and \"c\" (an integer in 0..n), got ",
                         p.dump()));
    }
    if (!out.problems.emplace(p["problem"].get<std::string>(), std::pair{n, c}).second) {
      return fail(StrCat("problem \"", p["problem"].get<std::string>(), "\" is listed twice"));
    }
    out.samples += n;
  }
  return out;
}

// "+0.0564", "-3", "=": the change from a to b.
std::string Delta(double a, double b, const char* format) { return a == b ? "=" : Fmt(format, b - a); }

// The scalar metadata values, as cells.
std::string Cell(const json& doc, const std::string& key) {
  if (!doc.contains(key)) return "-";
  const json& v = doc[key];
  return MdEscape(v.is_string() ? v.get<std::string>() : v.dump());
}

bool OurKey(const std::string& key) {
  for (const char* k :
       {kKeyPassAtK, kKeyAllPass, kKeyNonePass, kKeyProblemCount, kKeySamples, kKeyCategories, kKeyProblems})
    if (key == k) return true;
  return false;
}

}  // namespace

EvalSummary Summarize(const std::vector<SampleRecord>& records, const std::vector<int>& ks) {
  EvalSummary s;
  std::map<std::string, ProblemResult> by_name;  // sorted by name
  for (const SampleRecord& r : records) {
    ProblemResult& p = by_name[r.problem];
    p.problem = r.problem;
    ++p.n;
    if (r.passed) ++p.c;
    ++s.categories[r.category];
  }
  s.samples = static_cast<int>(records.size());
  for (auto& [name, p] : by_name) {
    p.rate = static_cast<double>(p.c) / p.n;
    if (p.c == p.n) ++s.problems_all_pass;
    if (p.c == 0) ++s.problems_none_pass;
    s.problems.push_back(p);
  }
  const int min_n = MinN(s);
  for (int k : std::set<int>(ks.begin(), ks.end())) {  // ascending, each once
    if (k < 1 || k > min_n) continue;
    double sum = 0;
    for (const ProblemResult& p : s.problems) sum += PassAtK(p.n, p.c, k);
    s.pass_at_k.emplace_back(k, sum / s.problems.size());
  }
  return s;
}

ordered_json SummaryJson(const EvalSummary& s, const ordered_json& metadata) {
  ordered_json j;
  ordered_json pass = ordered_json::object();
  for (const auto& [k, v] : s.pass_at_k) pass[std::to_string(k)] = v;
  j[kKeyPassAtK] = std::move(pass);
  j[kKeyAllPass] = s.problems_all_pass;
  j[kKeyNonePass] = s.problems_none_pass;
  j[kKeyProblemCount] = s.problems.size();
  j[kKeySamples] = s.samples;
  j[kKeyCategories] = ordered_json::object();
  for (const auto& [name, count] : s.categories) j[kKeyCategories][name] = count;
  ordered_json problems = ordered_json::array();
  for (const ProblemResult& p : s.problems)
    problems.push_back({{"problem", p.problem}, {"n", p.n}, {"c", p.c}, {"rate", p.rate}});
  j[kKeyProblems] = std::move(problems);
  if (metadata.is_object()) {
    for (const auto& [key, value] : metadata.items())
      if (!j.contains(key)) j[key] = value;  // the computed results win over a same-named setting
  }
  return j;
}

std::string FormatEvalSummary(const EvalSummary& s) {
  if (s.problems.empty()) return "verilog-eval: no samples\n";
  const long long np = static_cast<long long>(s.problems.size());
  std::string out = StrCat("verilog-eval: ", Problems(np), ", ", s.samples, " samples (", NText(s), ")\n");
  for (const auto& [k, v] : s.pass_at_k) out += StrCat("  pass@", k, ": ", Fmt("%.4f", v), "\n");
  if (s.pass_at_k.empty())
    out += StrCat("  pass@k: none reported (k must be between 1 and the smallest n, ", MinN(s), ")\n");
  out += StrCat("  problems at 100 %: ", s.problems_all_pass, " of ", np,
                Fmt(" (%.1f %%)", Percent(s.problems_all_pass, np)), "\n");
  out += StrCat("  problems at 0 %:   ", s.problems_none_pass, " of ", np,
                Fmt(" (%.1f %%)", Percent(s.problems_none_pass, np)), "\n");
  std::vector<std::pair<std::string, int>> cats(s.categories.begin(), s.categories.end());
  std::stable_sort(cats.begin(), cats.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t width = 0;
  for (const auto& [name, count] : cats) width = std::max(width, name.size());
  out += "  samples by outcome:\n";
  for (const auto& [name, count] : cats) {
    char line[256];
    std::snprintf(line, sizeof line, "    %-*s %6d  %5.1f %%\n", static_cast<int>(width), name.c_str(), count,
                  Percent(count, s.samples));
    out += line;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> EvalPlots(const EvalSummary& s) {
  std::vector<std::pair<std::string, std::string>> out;

  plot::BarChart rates;
  rates.title = StrCat("Pass rate per problem (", Problems(s.problems.size()), ", ", NText(s), ")");
  rates.x_label = "problem", rates.y_label = "pass rate (%)", rates.y_max = 100;
  rates.width = std::max(720, 96 + 8 * static_cast<int>(s.problems.size()));  // >= 8 px a bar for 156 problems
  for (const ProblemResult& p : s.problems) {
    rates.bars.push_back(
        {p.problem, 100 * p.rate, StrCat(p.problem, ": ", p.c, " of ", p.n, " pass", Fmt(" (%.0f %%)", 100 * p.rate))});
  }
  out.emplace_back("pass_rate_per_problem.svg", plot::RenderBarSvg(rates));

  // Buckets by passing samples: 0..n when every problem has the same n (the paper's 0 % and 100 %
  // bars are the ends); with mixed n, one bucket per distinct pass rate.
  plot::BarChart dist;
  dist.y_label = "problems";
  const int min_n = MinN(s);
  bool same_n = true;
  for (const ProblemResult& p : s.problems) same_n = same_n && p.n == min_n;
  if (same_n) {
    dist.title = StrCat("Problems by passing samples (", Problems(s.problems.size()), ", ", NText(s), ")");
    dist.x_label = StrCat("passing samples out of ", min_n);
    std::vector<int> count(min_n + 1, 0);
    for (const ProblemResult& p : s.problems) ++count[p.c];
    for (int c = 0; c <= min_n && !s.problems.empty(); ++c) {
      dist.bars.push_back({StrCat(c, "/", min_n), static_cast<double>(count[c]),
                           StrCat(Problems(count[c]), " with ", c, " of ", min_n, " passing")});
    }
  } else {
    dist.title = StrCat("Problems by pass rate (", Problems(s.problems.size()), ", ", NText(s), ")");
    dist.x_label = "pass rate";
    // Reduced fractions, so 1/3 and 2/6 share a bucket; ordered by value.
    auto less = [](const std::pair<int, int>& a, const std::pair<int, int>& b) {
      return 1LL * a.first * b.second < 1LL * b.first * a.second;
    };
    std::map<std::pair<int, int>, int, decltype(less)> count(less);
    for (const ProblemResult& p : s.problems) {
      const int g = std::gcd(p.c, p.n);
      ++count[{p.c / g, p.n / g}];
    }
    for (const auto& [frac, n] : count) {
      const double pct = 100.0 * frac.first / frac.second;
      dist.bars.push_back({Fmt("%.0f %%", pct), static_cast<double>(n),
                           StrCat(Problems(n), " passing ", frac.first, "/", frac.second, Fmt(" (%.1f %%)", pct))});
    }
  }
  out.emplace_back("score_distribution.svg", plot::RenderBarSvg(dist));
  return out;
}

Result<std::string> CompareEvalMarkdown(const json& a, const json& b, const std::string& label_a,
                                        const std::string& label_b) {
  GK_ASSIGN_OR_RETURN(ParsedSummary pa, ParseSummary(a, label_a));
  GK_ASSIGN_OR_RETURN(ParsedSummary pb, ParseSummary(b, label_b));
  const std::string la = MdEscape(label_a), lb = MdEscape(label_b);
  std::string out = StrCat("## ", la, " vs ", lb, ": verilog-eval\n\n| metric | ", la, " | ", lb, " | ", lb, " - ", la,
                           " |\n|---|---:|---:|---:|\n");

  std::set<int> ks;
  for (const auto& [k, v] : pa.pass_at_k) ks.insert(k);
  for (const auto& [k, v] : pb.pass_at_k) ks.insert(k);
  for (int k : ks) {
    const auto ia = pa.pass_at_k.find(k), ib = pb.pass_at_k.find(k);
    const bool both = ia != pa.pass_at_k.end() && ib != pb.pass_at_k.end();
    out += StrCat("| pass@", k, " | ", ia != pa.pass_at_k.end() ? Fmt("%.4f", ia->second) : "-", " | ",
                  ib != pb.pass_at_k.end() ? Fmt("%.4f", ib->second) : "-", " | ",
                  both ? Delta(ia->second, ib->second, "%+.4f") : "-", " |\n");
  }
  auto count_row = [&](const char* name, long long va, long long vb) {
    out += StrCat("| ", name, " | ", va, " | ", vb, " | ", Delta(va, vb, "%+.0f"), " |\n");
  };
  count_row("problems at 100 %", pa.all_pass, pb.all_pass);
  count_row("problems at 0 %", pa.none_pass, pb.none_pass);
  count_row("problems", pa.problems.size(), pb.problems.size());
  count_row("samples", pa.samples, pb.samples);

  // Settings the runs were made with (model, iverilog version, temperature ...), when any.
  std::vector<std::string> keys;
  for (const json* doc : {pa.doc, pb.doc}) {
    for (const auto& [key, value] : doc->items()) {
      if (OurKey(key) || value.is_structured() || std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      keys.push_back(key);
    }
  }
  if (!keys.empty()) {
    out += StrCat("\n### run settings\n\n| setting | ", la, " | ", lb, " |\n|---|---|---|\n");
    for (const std::string& key : keys)
      out += StrCat("| ", MdEscape(key), " | ", Cell(a, key), " | ", Cell(b, key), " |\n");
  }

  struct Diff {
    std::string problem;
    std::pair<long long, long long> a, b;
    double delta;
  };
  std::vector<Diff> diffs;
  std::vector<std::string> only_a, only_b;
  for (const auto& [name, nc] : pa.problems) {
    const auto it = pb.problems.find(name);
    if (it == pb.problems.end()) {
      only_a.push_back(name);
      continue;
    }
    const double ra = static_cast<double>(nc.second) / nc.first,
                 rb = static_cast<double>(it->second.second) / it->second.first;
    if (ra != rb) diffs.push_back({name, nc, it->second, rb - ra});
  }
  for (const auto& [name, nc] : pb.problems)
    if (!pa.problems.count(name)) only_b.push_back(name);
  std::stable_sort(diffs.begin(), diffs.end(), [](const Diff& x, const Diff& y) {
    return std::fabs(x.delta) > std::fabs(y.delta);
  });  // names stay sorted

  out += "\n### problems where the runs differ most\n\n";
  if (diffs.empty()) {
    out += "Every problem in both runs has the same pass rate in each.\n";
  } else {
    const std::string verb = diffs.size() == 1 ? " differs" : " differ";
    out += StrCat(Problems(diffs.size()), verb,
                  diffs.size() > kMaxDiffRows ? StrCat("; the ", kMaxDiffRows, " that differ most") : "", ":\n\n");
    out += StrCat("| problem | ", la, " | ", lb, " | ", lb, " - ", la, " |\n|---|---:|---:|---:|\n");
    for (size_t i = 0; i < diffs.size() && i < kMaxDiffRows; ++i) {
      const Diff& d = diffs[i];
      out += StrCat("| ", MdEscape(d.problem), " | ", d.a.second, "/", d.a.first, " | ", d.b.second, "/", d.b.first,
                    " | ", Fmt("%+.0f pp", 100 * d.delta), " |\n");
    }
  }
  auto only = [&](const std::string& label, const std::vector<std::string>& names) {
    if (names.empty()) return;
    std::string list;
    for (size_t i = 0; i < names.size() && i < kMaxOnlyNames; ++i) list += (i ? ", " : "") + MdEscape(names[i]);
    if (names.size() > kMaxOnlyNames) list += ", ...";
    out += StrCat("\nOnly in ", label, ": ", Problems(names.size()), " (", list, ")\n");
  };
  only(la, only_a);
  only(lb, only_b);
  return out;
}

}  // namespace gk::eval
