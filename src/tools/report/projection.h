// The report's roofline section: each run's measured training throughput and decode TPOT
// beside the lower bound tools/plan/roofline.h projects for the same model, shape and machine,
// with the ratio. Nothing is fitted to the measurements (docs/COST.md "Projection").
#pragma once

#include <vector>

#include "tools/report/artifacts.h"
#include "tools/report/measures.h"
#include "tools/report/tables.h"

namespace gk::report {

// One column per run. A run without a machine (no `hardware`), without a readable model
// config, or without the measurement says why in its cells instead of a number.
Table ProjectionTable(const std::vector<Run>& runs, const ReportOptions& options);

}  // namespace gk::report
