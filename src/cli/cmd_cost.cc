// gemmakit cost [--training-run FILE] [--bench FILE ...] [--hardware NAME | --price USD]
//   [--train-hardware/--train-price] [--serve-hardware/--serve-price] [--serve-hours 1,8,24]
//   [--json] [--catalog FILE] | --paper
// Training cost from a training_run.json, serving $ per 1M output tokens per workload from
// `gemmakit bench serve` results, and training + N hours of serving (tools/cost/cost_model.h).
// --paper recomputes the reference case's cost tables (tools/cost/paper.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "tools/cost/artifacts.h"
#include "tools/cost/cost_model.h"
#include "tools/cost/hardware_catalog.h"
#include "tools/cost/paper.h"

namespace gk::cli {
namespace {

struct Price {
  std::string name;  // machine, or "--price"
  double per_hour = 0;
};

// --X-hardware NAME or --X-price USD (the specific flag wins over --hardware / --price).
Result<Price> ResolvePrice(const cost::HardwareCatalog& cat, const std::string& what, std::string hw, double price,
                           const std::string& any_hw, double any_price) {
  if (hw.empty() && price <= 0) {
    hw = any_hw;
    price = any_price;
  }
  if (!hw.empty() && price > 0) return Status::Error(StrCat(what, ": give a hardware name or a price, not both"));
  if (price > 0) return Price{StrCat("$", price, "/h (--price)"), price};
  if (hw.empty()) return Status::Error(StrCat(what, ": no price: give --", what, "-hardware NAME or --", what, "-price USD_PER_HOUR"));
  GK_ASSIGN_OR_RETURN(cost::Machine m, cat.Find(hw));
  if (m.price_per_hour <= 0) {
    return Status::Error(StrCat(what, ": '", hw, "' has no hourly price in the catalog (a chip or cpu); give --", what,
                                "-price USD_PER_HOUR or a machine type"));
  }
  return Price{m.name, m.price_per_hour};
}

Result<std::vector<double>> ParseHours(const std::string& text) {
  std::vector<double> h;
  for (const std::string& item : SplitCommas(text)) {
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || !(v >= 0)) return Status::Error(StrCat("--serve-hours ", text, ": '", item, "' is not a number of hours >= 0"));
    h.push_back(v);
  }
  if (h.empty()) return Status::Error("--serve-hours: empty list");
  return h;
}

std::string M(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fM", x / 1e6);
  return buf;
}

}  // namespace

int RunCost(int argc, char** argv) {
  CLI::App app{"Training and serving cost from run artifacts and hourly prices; --paper reproduces the reference case (docs/COST.md)."};
  std::string training_run, hardware, train_hw, serve_hw, catalog_path, hours_text = "1,8,24";
  std::vector<std::string> bench;
  double price = 0, train_price = 0, serve_price = 0;
  bool json_out = false, paper = false;
  app.add_option("--training-run", training_run, "training_run.json of `gemmakit train` (wall time, tokens)");
  app.add_option("--bench", bench, "result or sweep JSONs of `gemmakit bench serve --save-result` (repeatable)");
  app.add_option("--hardware", hardware, "machine type for both training and serving (catalog name)");
  app.add_option("--price", price, "$/hour for both training and serving")->check(CLI::PositiveNumber);
  app.add_option("--train-hardware", train_hw, "machine type the training ran on");
  app.add_option("--train-price", train_price, "$/hour of the training machine")->check(CLI::PositiveNumber);
  app.add_option("--serve-hardware", serve_hw, "machine type the server ran on");
  app.add_option("--serve-price", serve_price, "$/hour of the serving machine")->check(CLI::PositiveNumber);
  app.add_option("--serve-hours", hours_text, "TCO horizons: training + these hours of serving (default 1,8,24)");
  app.add_option("--catalog", catalog_path, "hardware catalog TOML (default: the built-in data/hardware.toml)");
  app.add_flag("--json", json_out, "print JSON instead of tables");
  app.add_flag("--paper", paper, "recompute the reference case's cost tables (FACTS.md §3, §6) and check each figure");
  CLI11_PARSE(app, argc, argv);

  if (paper) {
    if (!training_run.empty() || !bench.empty()) return Fail("cost --paper takes no artifacts (it uses the report's own inputs)");
    const auto figures = cost::PaperFigures();
    if (json_out) {
      std::printf("%s\n", nlohmann::json{{"paper", cost::PaperFiguresJson(figures)}}.dump(2).c_str());
    } else {
      std::printf("%s", cost::FormatPaperFigures(figures).c_str());
    }
    return 0;
  }
  if (training_run.empty() && bench.empty()) return Fail("cost: give --training-run FILE and/or --bench FILE (or --paper)");
  auto catalog = cost::HardwareCatalog::Load(catalog_path);
  if (!catalog.ok()) return Fail(catalog.status());
  auto hours = ParseHours(hours_text);
  if (!hours.ok()) return Fail(hours.status());

  nlohmann::json j = nlohmann::json::object();
  std::string text;
  char buf[512];
  double training_cost = -1;
  if (!training_run.empty()) {
    auto run = cost::ReadTrainingRun(training_run);
    if (!run.ok()) return Fail(run.status());
    auto p = ResolvePrice(*catalog, "train", train_hw, train_price, hardware, price);
    if (!p.ok()) return Fail(p.status());
    const cost::TrainingCost c = cost::TrainingCostOf(run->wall_s / 3600.0, run->tokens, p->per_hour);
    training_cost = c.cost;
    j["training"] = {{"file", training_run}, {"hardware", p->name}, {"price_per_hour", c.price_per_hour}, {"hours", c.hours},
                     {"tokens", c.tokens}, {"tokens_per_s", run->tokens_per_s}, {"cost", c.cost},
                     {"cost_per_m_tokens", c.cost_per_m_tokens}, {"resumed", run->resumed}};
    std::snprintf(buf, sizeof buf,
                  "training (%s)\n  %.4f h wall-clock, %.0f tokens (%.1f tok/s) on %s at $%.2f/h\n"
                  "  cost %s, %s per 1M tokens trained\n",
                  training_run.c_str(), c.hours, c.tokens, run->tokens_per_s, p->name.c_str(), c.price_per_hour,
                  cost::Dollars(c.cost).c_str(), cost::Dollars(c.cost_per_m_tokens).c_str());
    text += buf;
    if (run->resumed) {
      text += StrCat("  note: a resumed run; earlier runs took ", (run->elapsed_all_s - run->wall_s) / 3600.0,
                     " h more (elapsed_s_all_runs), not costed here\n");
    }
  }
  double serve_rate = -1;
  std::string serve_name;
  if (!bench.empty() || training_cost >= 0) {
    // Serving is priced whenever a serving machine is named, for the TCO rows too.
    const bool have_serve_price = !serve_hw.empty() || serve_price > 0 || !hardware.empty() || price > 0;
    if (!bench.empty() || have_serve_price) {
      auto p = ResolvePrice(*catalog, "serve", serve_hw, serve_price, hardware, price);
      if (!p.ok()) return Fail(p.status());
      serve_rate = p->per_hour;
      serve_name = p->name;
    }
  }
  if (!bench.empty()) {
    std::vector<cost::ServingPoint> points;
    for (const std::string& f : bench) {
      auto r = cost::ReadServingResult(f);
      if (!r.ok()) return Fail(r.status());
      points.insert(points.end(), r->begin(), r->end());
    }
    j["serving"] = nlohmann::json::array();
    std::snprintf(buf, sizeof buf,
                  "\nserving on %s at $%.2f/h (per workload: the highest output throughput over its request rates)\n"
                  "  %-24s %8s %14s %12s %14s\n",
                  serve_name.c_str(), serve_rate, "workload", "rate", "output tok/s", "tok/h", "$/1M output");
    text += buf;
    for (const cost::ServingWorkload& w : cost::BestPerWorkload(points)) {
      const cost::ServingCost c = cost::ServingCostOf(w.Label(), w.best.output_throughput, serve_rate);
      j["serving"].push_back({{"workload", w.Label()}, {"input_len", w.input_len}, {"output_len", w.output_len},
                              {"request_rate", w.best.request_rate}, {"points", w.points}, {"file", w.best.file},
                              {"output_tok_per_s", c.output_tok_per_s}, {"tokens_per_hour", c.tokens_per_hour},
                              {"cost_per_m_output", c.cost_per_m_output}, {"hardware", serve_name},
                              {"price_per_hour", serve_rate}});
      std::snprintf(buf, sizeof buf, "  %-24s %8s %14.1f %12s %14s\n", w.Label().c_str(), w.best.request_rate.c_str(),
                    c.output_tok_per_s, M(c.tokens_per_hour).c_str(), cost::Dollars(c.cost_per_m_output).c_str());
      text += buf;
    }
  }
  if (training_cost >= 0 && serve_rate > 0) {
    std::vector<double> h = {0};
    h.insert(h.end(), hours->begin(), hours->end());
    j["tco"] = nlohmann::json::array();
    text += StrCat("\ntotal cost of ownership (training + hours of serving on ", serve_name, ")\n");
    for (const cost::TcoRow& r : cost::TcoRows(training_cost, serve_rate, h)) {
      j["tco"].push_back({{"serving_hours", r.serving_hours}, {"cost", r.cost}});
      std::snprintf(buf, sizeof buf, "  %-28s %12s\n",
                    r.serving_hours == 0 ? "training only" : StrCat("+ ", r.serving_hours, " h serving").c_str(),
                    cost::Dollars(r.cost).c_str());
      text += buf;
    }
  }
  if (json_out) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", text.c_str());
  }
  return 0;
}

}  // namespace gk::cli
