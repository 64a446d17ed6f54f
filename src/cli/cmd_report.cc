// gemmakit report RUN_DIR RUN_DIR... --out report.html [--label A,B] [--price P,P] [--hardware M,M]
//                 [--training-price P,P] [--serving-price P,P] [--at-rate R] [--tco-hours 1,8,24] [--title T]
// One self-contained HTML page and its Markdown twin comparing the runs (docs/REPORT.md).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "cli/common.h"
#include "tools/cost/hardware_catalog.h"
#include "tools/report/report.h"

namespace gk::cli {
namespace {

// "16.8,22.12": one non-negative number per run ("" = the flag was not given).
Result<std::vector<double>> PerRun(const std::string& flag, const std::string& text, size_t runs) {
  std::vector<double> out;
  if (text.empty()) return out;
  for (const std::string& item : SplitCommas(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (*end || !std::isfinite(v) || v < 0) {
      return Result<std::vector<double>>::Error(StrCat(flag, ": '", item, "' is not a non-negative number"));
    }
    out.push_back(v);
  }
  if (out.size() != runs) {
    return Result<std::vector<double>>::Error(StrCat(flag, " has ", out.size(), " values for ", runs, " RUN_DIRs"));
  }
  return out;
}

}  // namespace

int RunReport(int argc, char** argv) {
  CLI::App app{"Compare two or more runs (training, eval, serving benchmark, cost) in one self-contained HTML "
               "page and a Markdown twin, as the reference case's tables and figures."};
  std::vector<std::string> dirs;
  std::string out, labels, price, training_price, serving_price, at_rate, tco = "1,8,24", hardware, catalog;
  std::string title = "gemmakit report";
  app.add_option("run_dirs", dirs, "one directory per run (its training run, eval and bench results, found by file name)")
      ->required();
  app.add_option("--out", out, "the HTML page to write; report.md and the charts go beside it")->required();
  app.add_option("--label", labels, "column labels, comma-separated, one per RUN_DIR (default: run.json, else the name)");
  app.add_option("--price", price, "$/h per RUN_DIR for both training and serving, comma-separated");
  app.add_option("--training-price", training_price, "$/h per RUN_DIR of the training machine");
  app.add_option("--serving-price", serving_price, "$/h per RUN_DIR of the serving machine");
  app.add_option("--hardware", hardware,
                 "catalog machine per RUN_DIR, comma-separated (e.g. tpu-v5p-8,a3-highgpu-2g): replaces run.json's "
                 "machine and prices with the catalog's hourly rate (the price flags still override it)");
  app.add_option("--catalog", catalog, "hardware catalog TOML (default: the built-in data/hardware.toml)");
  app.add_option("--at-rate", at_rate, "request rate (or inf) at which latencies are compared (default: lowest shared)");
  app.add_option("--tco-hours", tco, "serving hours added to training in the TCO table");
  app.add_option("--title", title, "the page's title");
  CLI11_PARSE(app, argc, argv);

  std::vector<report::RunSpec> specs;
  for (const std::string& d : dirs) {
    auto spec = report::LoadRunSpec(d);
    if (!spec.ok()) return Fail(spec.status());
    specs.push_back(std::move(*spec));
  }
  const std::vector<std::string> names = SplitCommas(labels);
  if (!labels.empty() && names.size() != dirs.size()) {
    return Fail(StrCat("--label has ", names.size(), " labels for ", dirs.size(), " RUN_DIRs"));
  }
  const std::vector<std::string> machines = SplitCommas(hardware);
  if (!hardware.empty() && machines.size() != dirs.size()) {
    return Fail(StrCat("--hardware has ", machines.size(), " names for ", dirs.size(), " RUN_DIRs"));
  }
  auto both = PerRun("--price", price, dirs.size());
  auto train = PerRun("--training-price", training_price, dirs.size());
  auto serve = PerRun("--serving-price", serving_price, dirs.size());
  for (const auto* r : {&both, &train, &serve})
    if (!r->ok()) return Fail(r->status());
  // Flags override run.json: --hardware replaces its machine and prices (the catalog fills
  // them below); --price and the specific price flags override both.
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!names.empty()) specs[i].label = names[i];
    if (!machines.empty()) {
      specs[i].hardware = machines[i];
      specs[i].training_price_per_hour.reset();
      specs[i].serving_price_per_hour.reset();
    }
    if (!both->empty()) specs[i].training_price_per_hour = specs[i].serving_price_per_hour = (*both)[i];
    if (!train->empty()) specs[i].training_price_per_hour = (*train)[i];
    if (!serve->empty()) specs[i].serving_price_per_hour = (*serve)[i];
  }
  // The catalog is read only when some run names its hardware; a machine's one hourly rate
  // prices both its training and its serving (0 in the catalog: unknown, left open).
  bool named = false;
  for (const report::RunSpec& s : specs) named |= !s.hardware.empty();
  if (named) {
    auto cat = cost::HardwareCatalog::Load(catalog);
    if (!cat.ok()) return Fail(cat.status());
    // The machine is kept for the roofline section; `cpu` is measured once, here.
    std::map<std::string, cost::Machine> found;
    for (report::RunSpec& s : specs) {
      if (s.hardware.empty()) continue;
      if (!found.count(s.hardware)) {
        auto m = cat->Find(s.hardware);
        if (!m.ok()) return Fail(m.status().Wrap(StrCat("run \"", s.label, "\" hardware \"", s.hardware, "\"")));
        found.emplace(s.hardware, *m);
      }
      s.machine = found.at(s.hardware);
    }
    const report::PriceLookup lookup = [&found](const std::string& name) -> Result<report::HardwarePrices> {
      const cost::Machine& m = found.at(name);
      report::HardwarePrices p;
      if (m.price_per_hour > 0) p.training_per_hour = p.serving_per_hour = m.price_per_hour;
      return p;
    };
    for (report::RunSpec& s : specs) {
      if (Status st = report::FillPrices(s, lookup); !st.ok()) return Fail(st);
    }
  }

  report::ReportOptions options;
  if (!at_rate.empty()) {
    char* end = nullptr;
    const double r = at_rate == "inf" ? std::numeric_limits<double>::infinity() : std::strtod(at_rate.c_str(), &end);
    if ((end && *end) || !(r > 0)) return Fail(StrCat("--at-rate: '", at_rate, "' is not a positive number or inf"));
    options.at_rate = r;
  }
  auto hours = PerRun("--tco-hours", tco, SplitCommas(tco).size());
  if (!hours.ok()) return Fail(hours.status());
  options.tco_hours = *hours;

  auto runs = report::LoadRuns(specs);
  if (!runs.ok()) return Fail(runs.status());
  const report::Report rep = report::BuildReport(*runs, options, title);
  auto written = report::WriteReport(rep, out);
  if (!written.ok()) return Fail(written.status());
  std::printf("report: %s (%zu runs)\n", (*written)[0].c_str(), runs->size());
  std::printf("markdown: %s, %zu charts beside it\n", (*written)[1].c_str(), written->size() - 2);
  return 0;
}

}  // namespace gk::cli
