// `gemmakit report RUN_DIR... --out report.html`: one self-contained HTML page (inline CSS and
// SVG, no scripts, no external resources) and a Markdown twin comparing two or more runs, in the
// reference case's layout (../shared/paper/FACTS.md): training, evaluation, serving by context
// length, cost, TCO and a relative-advantage summary. docs/REPORT.md describes the inputs.
#pragma once

#include <string>
#include <vector>

#include "tools/report/artifacts.h"
#include "tools/report/figures.h"
#include "tools/report/measures.h"
#include "tools/report/run_spec.h"
#include "tools/report/tables.h"

namespace gk::report {

struct Section {
  std::string id, title;
  std::vector<Table> tables;
  std::vector<Figure> figures;
};

struct Report {
  std::string title;
  std::vector<Section> sections;
};

// Loads every run. Errors: fewer than two runs, two runs with one label, a RUN_DIR with no
// artifacts at all, or any error of LoadRun.
Result<std::vector<Run>> LoadRuns(const std::vector<RunSpec>& specs);

Report BuildReport(const std::vector<Run>& runs, const ReportOptions& options, const std::string& title);

std::string RenderHtml(const Report& report);
// figure_prefix + figure.file is where each chart's SVG lies beside the Markdown file.
std::string RenderMarkdown(const Report& report, const std::string& figure_prefix);

// Writes html_path (atomically, last), the .md beside it and the charts as <stem>-<figure>.svg.
// Returns the paths written, the HTML first.
Result<std::vector<std::string>> WriteReport(const Report& report, const std::string& html_path);

}  // namespace gk::report
