#include "tools/report/report.h"

#include "tools/report/projection.h"

#include <filesystem>
#include <set>

#include "tools/report/advantage.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::report {
namespace fs = std::filesystem;

namespace {

Result<std::vector<Run>> LoadRunsUnguarded(const std::vector<RunSpec>& specs) {
  if (specs.size() < 2) {
    return Result<std::vector<Run>>::Error(StrCat("report needs at least two RUN_DIRs to compare, got ", specs.size()));
  }
  std::vector<Run> runs;
  std::set<std::string> labels;
  for (const RunSpec& spec : specs) {
    if (!labels.insert(spec.label).second) {
      return Result<std::vector<Run>>::Error(StrCat("two runs are labelled \"", spec.label,
                                                    "\"; give each its own label (run.json \"label\" or --label)"));
    }
    GK_ASSIGN_OR_RETURN(Run run, LoadRun(spec));
    if (run.empty()) {
      return Result<std::vector<Run>>::Error(
          StrCat("RUN_DIR ", spec.dir, ": no artifacts found (looked for training_run.json, an eval summary.json, ",
                 "sweep-*.json and *qps*.json bench results below it)"));
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace

// The runs' artifacts are outside input: whatever reading them throws (a field of an
// unexpected type) is an error, not an abort (util/guarded_parse.h).
Result<std::vector<Run>> LoadRuns(const std::vector<RunSpec>& specs) {
  return GuardedParse("report", [&] { return LoadRunsUnguarded(specs); });
}

Report BuildReport(const std::vector<Run>& runs, const ReportOptions& options, const std::string& title) {
  Report r;
  r.title = title;
  r.sections.push_back({"runs", "Runs", {RunsTable(runs)}, {}});
  r.sections.push_back({"training", "Training", {TrainingTable(runs)}, TrainingFigures(runs)});
  r.sections.push_back({"evaluation", "Evaluation", {EvalTable(runs)}, EvalFigures(runs)});
  r.sections.push_back({"serving", "Serving", {ServingTable(runs, options)}, ServingFigures(runs)});
  r.sections.push_back({"cost", "Cost", {CostTable(runs), TcoTable(runs, options)}, {}});
  r.sections.push_back({"projection", "Roofline projection", {ProjectionTable(runs, options)}, {}});
  const std::vector<Headline> headlines = Headlines(runs, options);
  Section adv{"advantage", "Relative advantage", {}, AdvantageFigures(runs, headlines)};
  for (size_t b = 1; b < runs.size(); ++b) adv.tables.push_back(AdvantageTable(runs, headlines, b));
  r.sections.push_back(std::move(adv));
  return r;
}

Result<std::vector<std::string>> WriteReport(const Report& report, const std::string& html_path) {
  const fs::path html(html_path);
  if (html.filename().empty() || html.extension() == ".md" || html.extension() == ".svg") {
    return Result<std::vector<std::string>>::Error(
        StrCat("--out ", html_path, ": give the HTML page's file name (report.md and the charts go beside it)"));
  }
  const fs::path dir = html.parent_path().empty() ? fs::path(".") : html.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Result<std::vector<std::string>>::Error(StrCat("--out ", html_path, ": cannot create ", dir.string(), ": ", ec.message()));
  const std::string stem = html.stem().string();
  std::vector<std::string> written{html_path};
  for (const Section& s : report.sections) {
    for (const Figure& f : s.figures) {
      if (f.svg.empty()) continue;
      const std::string path = (dir / (stem + "-" + f.file)).string();
      GK_RETURN_IF_ERROR(WriteFileAtomic(path, f.svg));
      written.push_back(path);
    }
  }
  const std::string md = (dir / (stem + ".md")).string();
  GK_RETURN_IF_ERROR(WriteFileAtomic(md, RenderMarkdown(report, stem + "-")));
  written.insert(written.begin() + 1, md);
  GK_RETURN_IF_ERROR(WriteFileAtomic(html_path, RenderHtml(report)));  // last: the page appears complete or not at all
  return written;
}

}  // namespace gk::report
