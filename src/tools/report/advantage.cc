#include "tools/report/advantage.h"

#include <cmath>
#include <functional>

#include "tools/report/format.h"

namespace gk::report {
namespace {

enum class Needs { kNothing, kTrainingPrice, kServingPrice, kBothPrices };

// A cost is absent for want of a price when the run has what the price multiplies.
std::string MissingText(const Run& r, Needs needs) {
  const bool training_price = !r.spec.training_price_per_hour, serving_price = !r.spec.serving_price_per_hour;
  switch (needs) {
    case Needs::kNothing: break;
    case Needs::kTrainingPrice: if (r.training && training_price) return kNoPrice; break;
    case Needs::kServingPrice: if (!r.serving.empty() && serving_price) return kNoPrice; break;
    case Needs::kBothPrices: if (r.training && (training_price || serving_price)) return kNoPrice; break;
  }
  return kNotMeasured;
}

Headline Make(const std::string& name, bool higher, Unit unit, const std::vector<Run>& runs,
              const std::function<std::optional<double>(const Run&)>& f, Needs needs = Needs::kNothing) {
  Headline h{name, higher, unit, {}, "", {}};
  for (const Run& r : runs) {
    h.values.push_back(f(r));
    h.missing.push_back(h.values.back() ? "" : MissingText(r, needs));
  }
  return h;
}

// Advantage of b over a (> 1: b better), when both are positive.
std::optional<double> Factor(const Headline& h, double a, double b) {
  if (!(a > 0) || !(b > 0)) return std::nullopt;
  return h.higher_is_better ? b / a : a / b;
}

}  // namespace

std::string FormatValue(Unit unit, double v) {
  switch (unit) {
    case Unit::kTokPerS: return Grouped(v, v < 100 ? 1 : 0) + " tok/s";
    case Unit::kSeconds: return Fixed(v, 2) + " s";
    case Unit::kDollars: return Money(v);
    case Unit::kLoss: return Fixed(v, 3);
    case Unit::kPassRate: return Fixed(v, 4);
    case Unit::kMillis: return Millis(v);
  }
  return Fixed(v, 3);
}

std::vector<Headline> Headlines(const std::vector<Run>& runs, const ReportOptions& options) {
  std::vector<Headline> hs;
  hs.push_back(Make("training throughput", true, Unit::kTokPerS, runs,
                    [](const Run& r) { return r.training ? std::optional(r.training->tokens_per_s) : std::nullopt; }));
  hs.push_back(Make("training time per sample", false, Unit::kSeconds, runs, TimePerSample));
  hs.push_back(Make("training cost", false, Unit::kDollars, runs, [](const Run& r) {
    const auto c = TrainingCostOfRun(r);
    return c ? std::optional(c->cost) : std::nullopt;
  }, Needs::kTrainingPrice));
  hs.push_back(Make("cost per 1M tokens trained", false, Unit::kDollars, runs, [](const Run& r) {
    const auto c = TrainingCostOfRun(r);
    return c ? std::optional(c->cost_per_m_tokens) : std::nullopt;
  }, Needs::kTrainingPrice));
  Headline loss = Make("final training loss", false, Unit::kLoss, runs,
                       [](const Run& r) { return r.training ? r.training->final_loss : std::nullopt; });
  // Totals and final losses rank runs only when the runs did the same work: a run of 10 steps
  // is cheaper and has a higher loss than one of 30 on any machine.
  const Run* first = nullptr;
  std::string unequal_work;
  for (const Run& r : runs) {
    if (!r.training) continue;
    if (!first) { first = &r; continue; }
    if (r.training->loss_kind != first->training->loss_kind) {
      loss.not_comparable = "the losses count different tokens (config.data.loss differs)";
    }
    if (r.training->samples != first->training->samples) {
      unequal_work = StrCat("unequal training (", first->training->samples ? StrCat(*first->training->samples) : "?",
                            " vs ", r.training->samples ? StrCat(*r.training->samples) : "?", " samples)");
    }
  }
  if (loss.not_comparable.empty()) loss.not_comparable = unequal_work;
  hs[2].not_comparable = unequal_work;  // training cost
  hs.push_back(loss);
  // pass@1 and the largest k every evaluated run reports.
  std::optional<int> kmax;
  for (const Run& r : runs) {
    if (!r.eval || r.eval->pass_at_k.empty()) continue;
    const int k = r.eval->pass_at_k.rbegin()->first;
    kmax = kmax ? std::min(*kmax, k) : k;
  }
  std::vector<int> ks{1};
  if (kmax && *kmax > 1) ks.push_back(*kmax);
  for (int k : ks) {
    hs.push_back(Make(StrCat("pass@", k), true, Unit::kPassRate, runs, [k](const Run& r) -> std::optional<double> {
      if (!r.eval) return std::nullopt;
      const auto it = r.eval->pass_at_k.find(k);
      return it == r.eval->pass_at_k.end() ? std::nullopt : std::optional(it->second);
    }));
  }
  for (const WorkloadKey& key : AllWorkloads(runs)) {
    const std::string w = StrCat(key.first, "/", key.second);
    hs.push_back(Make("peak output tok/s, " + w, true, Unit::kTokPerS, runs, [key](const Run& r) -> std::optional<double> {
      const ServingWorkload* s = FindWorkload(r, key);
      const auto b = s ? PeakOutput(*s) : std::nullopt;
      return b ? std::optional(b->value) : std::nullopt;
    }));
    const std::optional<double> rate = LatencyRate(runs, key, options);
    if (rate) {
      for (auto [label, field] : {std::pair{"median TTFT", &ServingPoint::median_ttft_ms},
                                  std::pair{"median TPOT", &ServingPoint::median_tpot_ms}}) {
        hs.push_back(Make(StrCat(label, ", ", w, " at ", Rate(*rate)), false, Unit::kMillis, runs,
                          [key, rate, field](const Run& r) -> std::optional<double> {
                            const ServingWorkload* s = FindWorkload(r, key);
                            const ServingPoint* p = s ? PointAt(*s, *rate) : nullptr;
                            return p && std::isfinite(p->*field) ? std::optional(p->*field) : std::nullopt;
                          }));
      }
    }
    hs.push_back(Make("serving $ per 1M output tokens, " + w, false, Unit::kDollars, runs, [key](const Run& r) {
      const auto c = ServingCostOfRun(r, key, ServingBasis::kPeak);
      return c ? std::optional(c->cost_per_m_output) : std::nullopt;
    }, Needs::kServingPrice));
  }
  for (double h : options.tco_hours) {
    hs.push_back(Make(StrCat("TCO: training + ", Fixed(h, h == static_cast<long>(h) ? 0 : 1), " h serving"), false,
                      Unit::kDollars, runs, [h](const Run& r) { return TcoOf(r, h); }, Needs::kBothPrices));
    hs.back().not_comparable = unequal_work;
  }
  return hs;
}

Table AdvantageTable(const std::vector<Run>& runs, const std::vector<Headline>& headlines, size_t b) {
  const std::string& la = runs[0].spec.label;
  const std::string& lb = runs[b].spec.label;
  Table t{StrCat("Relative advantage: ", lb, " vs ", la), {"metric", la, lb, StrCat(lb, " / ", la), "better"}, {},
          "Throughputs and pass rates: higher is better; times, losses and costs: lower is better."};
  for (const Headline& h : headlines) {
    const std::optional<double> a = h.values[0], v = h.values[b];
    std::vector<std::string> row{h.name, a ? FormatValue(h.unit, *a) : h.missing[0], v ? FormatValue(h.unit, *v) : h.missing[b]};
    if (!a || !v) {
      row.insert(row.end(), {"", !a ? h.missing[0] : h.missing[b]});
    } else {
      row.push_back(*a != 0 ? Ratio(*v / *a) : "n/a");
      if (!h.not_comparable.empty()) {
        row.push_back("not comparable: " + h.not_comparable);
      } else if (*a == *v) {
        row.push_back("equal");
      } else {
        const bool b_wins = h.higher_is_better ? *v > *a : *v < *a;
        const std::optional<double> f = b_wins ? Factor(h, *a, *v) : Factor(h, *v, *a);
        row.push_back(StrCat(b_wins ? lb : la, f ? StrCat(", ", Ratio(*f), h.higher_is_better ? " higher" : " lower") : ""));
      }
    }
    t.rows.push_back(row);
  }
  return t;
}

plot::BarChart AdvantageChart(const std::vector<Run>& runs, const std::vector<Headline>& headlines, size_t b) {
  plot::BarChart c;
  c.title = StrCat("Advantage of ", runs[b].spec.label, " over ", runs[0].spec.label, " (> 1: ", runs[b].spec.label, " better)");
  c.y_label = "advantage factor";
  c.value_decimals = 2;
  c.max_label_chars = 40;
  for (const Headline& h : headlines) {
    if (!h.values[0] || !h.values[b] || !h.not_comparable.empty()) continue;
    const std::optional<double> f = Factor(h, *h.values[0], *h.values[b]);
    if (!f) continue;
    c.bars.push_back({h.name, *f, StrCat(h.name, ": ", FormatValue(h.unit, *h.values[b]), " vs ",
                                         FormatValue(h.unit, *h.values[0]), " = ", Ratio(*f), " advantage")});
  }
  return c;
}

}  // namespace gk::report
