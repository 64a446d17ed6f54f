#include "tools/report/tables.h"

#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "tools/report/format.h"

namespace gk::report {
namespace {

using Cell = std::function<std::string(const Run&)>;

std::vector<std::string> Row(const std::vector<Run>& runs, std::vector<std::string> first, const Cell& cell) {
  for (const Run& r : runs) first.push_back(cell(r));
  return first;
}

std::string Price(const std::optional<double>& p) { return p ? Money(*p) + "/h" : kNoPrice; }

std::string LossKind(const std::string& kind) {
  if (kind == "assistant") return " (assistant-only)";
  if (kind == "all") return " (all tokens)";
  return kind.empty() ? "" : " (" + kind + ")";
}

// A training cell: not measured without a training run, else cell(t).
Cell Training(std::function<std::string(const Run&, const TrainingArtifact&)> f) {
  return [f](const Run& r) { return r.training ? f(r, *r.training) : std::string(kNotMeasured); };
}

Cell Eval(std::function<std::string(const EvalArtifact&)> f) {
  return [f](const Run& r) { return r.eval ? f(*r.eval) : std::string(kNotMeasured); };
}

}  // namespace

std::vector<std::string> RunHeader(const std::vector<Run>& runs, const std::string& first) {
  std::vector<std::string> h{first};
  for (const Run& r : runs) h.push_back(r.spec.label);
  return h;
}

Table RunsTable(const std::vector<Run>& runs) {
  Table t{"Runs", RunHeader(runs, ""), {}, "Artifacts are found by file name anywhere below each RUN_DIR."};
  t.rows.push_back(Row(runs, {"RUN_DIR"}, [](const Run& r) { return r.spec.dir; }));
  t.rows.push_back(Row(runs, {"hardware"}, [](const Run& r) { return r.spec.hardware.empty() ? "not given" : r.spec.hardware; }));
  t.rows.push_back(Row(runs, {"training price"}, [](const Run& r) { return Price(r.spec.training_price_per_hour); }));
  t.rows.push_back(Row(runs, {"serving price"}, [](const Run& r) { return Price(r.spec.serving_price_per_hour); }));
  t.rows.push_back(Row(runs, {"training run"}, [](const Run& r) { return r.training ? r.training->file : kNotMeasured; }));
  t.rows.push_back(Row(runs, {"eval"}, [](const Run& r) { return r.eval ? r.eval->file : kNotMeasured; }));
  t.rows.push_back(Row(runs, {"serving workloads"}, [](const Run& r) {
    std::string s;
    for (const ServingWorkload& w : r.serving) s += (s.empty() ? "" : "; ") + WorkloadName(w);
    return s.empty() ? std::string(kNotMeasured) : s;
  }));
  return t;
}

Table TrainingTable(const std::vector<Run>& runs) {
  Table t{"Training", RunHeader(runs), {},
          "Cost = wall-clock hours x the training price; tokens are every token of every step (tok/s x time)."};
  t.rows.push_back(Row(runs, {"wall-clock"}, Training([](const Run&, const TrainingArtifact& a) { return Duration(a.wall_time_s); })));
  t.rows.push_back(Row(runs, {"throughput"}, Training([](const Run&, const TrainingArtifact& a) {
    return Grouped(a.tokens_per_s, a.tokens_per_s < 100 ? 1 : 0) + " tok/s";
  })));
  t.rows.push_back(Row(runs, {"time per sample"}, Training([](const Run& r, const TrainingArtifact&) {
    const std::optional<double> s = TimePerSample(r);
    return s ? Fixed(*s, 2) + " s" : std::string(kNotMeasured);
  })));
  t.rows.push_back(Row(runs, {"final training loss"}, Training([](const Run&, const TrainingArtifact& a) {
    return a.final_loss ? Fixed(*a.final_loss, 3) + LossKind(a.loss_kind) : std::string(kNotMeasured);
  })));
  t.rows.push_back(Row(runs, {"tokens trained"}, Training([](const Run&, const TrainingArtifact& a) { return Tokens(a.tokens); })));
  t.rows.push_back(Row(runs, {"total cost"}, Training([](const Run& r, const TrainingArtifact&) {
    const auto c = TrainingCostOfRun(r);
    return c ? Money(c->cost) : std::string(kNoPrice);
  })));
  t.rows.push_back(Row(runs, {"cost per 1M tokens trained"}, Training([](const Run& r, const TrainingArtifact&) {
    const auto c = TrainingCostOfRun(r);
    return c ? Money(c->cost_per_m_tokens) : std::string(kNoPrice);
  })));
  return t;
}

Table EvalTable(const std::vector<Run>& runs) {
  Table t{"Evaluation (verilog-eval spec-to-RTL)", RunHeader(runs), {}, "Unbiased pass@k over the problems of each eval."};
  std::set<int> ks;
  for (const Run& r : runs)
    if (r.eval)
      for (const auto& [k, v] : r.eval->pass_at_k) ks.insert(k);
  for (int k : ks) {
    t.rows.push_back(Row(runs, {StrCat("pass@", k)}, Eval([k](const EvalArtifact& e) {
      const auto it = e.pass_at_k.find(k);
      return it == e.pass_at_k.end() ? std::string(kNotMeasured) : Fixed(it->second, 4);
    })));
  }
  if (ks.empty()) t.rows.push_back(Row(runs, {"pass@1"}, [](const Run&) { return std::string(kNotMeasured); }));
  t.rows.push_back(Row(runs, {"problems at 100 % / at 0 %"},
                       Eval([](const EvalArtifact& e) { return StrCat(e.all_pass, " / ", e.none_pass); })));
  t.rows.push_back(Row(runs, {"problems"}, Eval([](const EvalArtifact& e) { return StrCat(e.problem_count); })));
  return t;
}

Table ServingTable(const std::vector<Run>& runs, const ReportOptions& options) {
  Table t{"Serving by context length", RunHeader(runs, "metric"), {},
          "Peak output tok/s: the busiest second (vLLM's max_output_tokens_per_s), highest over the request-rate "
          "sweep; best output throughput: output tokens / duration, highest over the sweep; latencies are medians "
          "at the stated request rate."};
  t.header.insert(t.header.begin(), "input / output");
  const std::vector<WorkloadKey> keys = AllWorkloads(runs);
  for (const WorkloadKey& key : keys) {
    const std::string name = StrCat(key.first, " / ", key.second);
    auto add = [&](const std::string& metric, const std::function<std::string(const ServingWorkload&)>& f) {
      t.rows.push_back(Row(runs, {"", metric}, [&](const Run& r) {
        const ServingWorkload* w = FindWorkload(r, key);
        return w ? f(*w) : std::string(kNotMeasured);
      }));
    };
    const size_t first_row = t.rows.size();
    add("peak output tok/s", [](const ServingWorkload& w) {
      const auto b = PeakOutput(w);
      return b ? Grouped(b->value) + " (at " + Rate(b->request_rate) + ")" : std::string(kNotMeasured);
    });
    add("best output throughput", [](const ServingWorkload& w) {
      const auto b = BestOutput(w);
      return b ? Grouped(b->value, 1) + " tok/s (at " + Rate(b->request_rate) + ")" : std::string(kNotMeasured);
    });
    const std::optional<double> rate = LatencyRate(runs, key, options);
    auto at = [&](const std::string& metric, double ServingPoint::*field) {
      add(metric + (rate ? " at " + Rate(*rate) : ""), [&](const ServingWorkload& w) {
        const ServingPoint* p = rate ? PointAt(w, *rate) : (w.points.empty() ? nullptr : &w.points.front());
        if (!p) return StrCat(kNotMeasured, rate ? " at " + Rate(*rate) : "");
        if (!std::isfinite(p->*field)) return std::string(kNotMeasured);
        return Millis(p->*field) + (rate ? "" : " (at " + Rate(p->request_rate) + ")");
      });
    };
    at("median TTFT", &ServingPoint::median_ttft_ms);
    at("median TPOT", &ServingPoint::median_tpot_ms);
    at("P99 ITL", &ServingPoint::p99_itl_ms);
    add("request rates measured", [](const ServingWorkload& w) {
      std::string s;
      for (const ServingPoint& p : w.points) s += (s.empty() ? "" : ", ") + Rate(p.request_rate);
      return s;
    });
    t.rows[first_row][0] = name;  // only a workload's first row names it, as in the reference case
  }
  if (keys.empty()) {
    std::vector<std::string> row{"", "peak output tok/s"};
    for (size_t i = 0; i < runs.size(); ++i) row.push_back(kNotMeasured);
    t.rows.push_back(row);
  }
  return t;
}

Table CostTable(const std::vector<Run>& runs) {
  Table t{"Serving cost", RunHeader(runs, "metric"), {},
          "$ per 1M output tokens = serving price / (output tok/s x 3600 / 1e6). The reference case's basis is the "
          "peak output tok/s over the sweep; the sustained rows use the best output throughput instead."};
  t.header.insert(t.header.begin(), "input / output");
  for (const WorkloadKey& key : AllWorkloads(runs)) {
    const size_t first_row = t.rows.size();
    for (ServingBasis basis : {ServingBasis::kPeak, ServingBasis::kSustained}) {
      const std::string which = basis == ServingBasis::kPeak ? "peak" : "sustained";
      auto cell = [&](bool per_m) {
        return [&, per_m](const Run& r) {
          if (!FindWorkload(r, key)) return std::string(kNotMeasured);
          if (!r.spec.serving_price_per_hour && per_m) return std::string(kNoPrice);
          const auto c = ServingCostOfRun(r, key, basis);
          if (!per_m) {  // tokens/hour needs no price
            const ServingWorkload* w = FindWorkload(r, key);
            const auto b = basis == ServingBasis::kPeak ? PeakOutput(*w) : BestOutput(*w);
            return b ? Tokens(b->value * 3600) : std::string(kNotMeasured);
          }
          return c ? Money(c->cost_per_m_output) : std::string(kNotMeasured);
        };
      };
      t.rows.push_back(Row(runs, {"", "output tokens/hour (" + which + ")"}, cell(false)));
      t.rows.push_back(Row(runs, {"", "$ per 1M output tokens (" + which + ")"}, cell(true)));
    }
    t.rows[first_row][0] = StrCat(key.first, " / ", key.second);
  }
  if (t.rows.empty()) t.rows.push_back(Row(runs, {"", "$ per 1M output tokens"}, [](const Run&) { return std::string(kNotMeasured); }));
  return t;
}

Table TcoTable(const std::vector<Run>& runs, const ReportOptions& options) {
  Table t{"Total cost of ownership", RunHeader(runs, ""), {},
          "Training cost + hours x the serving price (FACTS: every row is training + hours x hourly rate)."};
  auto cell = [](double hours) {
    return [hours](const Run& r) {
      if (!r.training) return std::string(kNotMeasured);
      if (!r.spec.training_price_per_hour || (hours > 0 && !r.spec.serving_price_per_hour)) return std::string(kNoPrice);
      if (hours == 0) return Money(TrainingCostOfRun(r)->cost);
      return Money(*TcoOf(r, hours));
    };
  };
  t.rows.push_back(Row(runs, {"training"}, cell(0)));
  for (double h : options.tco_hours) t.rows.push_back(Row(runs, {"+ " + Fixed(h, h == static_cast<long>(h) ? 0 : 1) + " h serving"}, cell(h)));
  return t;
}

}  // namespace gk::report
