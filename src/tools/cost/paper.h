// `gemmakit cost --paper`: every cost figure of the reference case (../shared/paper/FACTS.md
// §3 and §6) recomputed from the report's own inputs (measured hours, tok/s, on-demand
// rates) with the arithmetic of cost_model.h, each beside the figure the report prints.
// Where a figure does not follow from its inputs the row says so, and a second row shows
// which rounded input reproduces it, if any does; nothing is adjusted to match.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gk::cost {

struct PaperFigure {
  std::string table;     // "§3 training", "§6 serving", "§6 TCO", "§3/§6 ratios"
  std::string label;     // what the figure is
  std::string inputs;    // how it is computed, from which inputs
  std::string computed;  // as the report would print it
  std::string report;    // the report's figure ("" = the report prints none)
  std::string note;      // why it differs / which inputs reproduce it
  bool Matches() const { return report.empty() || computed == report; }
};

std::vector<PaperFigure> PaperFigures();
// The figures as an aligned table; the summary line counts the ones that differ.
std::string FormatPaperFigures(const std::vector<PaperFigure>& figures);
nlohmann::json PaperFiguresJson(const std::vector<PaperFigure>& figures);

}  // namespace gk::cost
