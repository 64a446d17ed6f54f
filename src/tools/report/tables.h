// The report's tables as plain text cells (the HTML and Markdown writers escape them). One
// column per run; "not measured" where a run lacks the artifact, "no price given" where a
// cost needs a price the run did not get.
#pragma once

#include <string>
#include <vector>

#include "tools/report/artifacts.h"
#include "tools/report/measures.h"

namespace gk::report {

struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::string note;  // one sentence under the table: the basis of its numbers
};

Table RunsTable(const std::vector<Run>& runs);
Table TrainingTable(const std::vector<Run>& runs);
Table EvalTable(const std::vector<Run>& runs);
Table ServingTable(const std::vector<Run>& runs, const ReportOptions& options);
Table CostTable(const std::vector<Run>& runs);
Table TcoTable(const std::vector<Run>& runs, const ReportOptions& options);

// The header every per-run table starts with: "metric", then each run's label.
std::vector<std::string> RunHeader(const std::vector<Run>& runs, const std::string& first = "metric");

}  // namespace gk::report
