// Who a RUN_DIR is: its label, hardware name and hourly prices, from an optional
// RUN_DIR/run.json and the command line (docs/REPORT.md "run.json").
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "util/result.h"

namespace gk::report {

struct RunSpec {
  std::string dir;                              // the RUN_DIR as given
  std::string label;                            // column heading: run.json, --label, else the dir's name
  std::string hardware;                         // a catalog name ("tpu-v5p-8"), "" when not given
  std::optional<double> training_price_per_hour;  // $/h of the machine that trained
  std::optional<double> serving_price_per_hour;   // $/h of the machine that served
};

// Prices of a hardware name, for a catalog (`--hardware NAME`) to fill what run.json and the
// flags left open. Absent fields stay open.
struct HardwarePrices {
  std::optional<double> training_per_hour, serving_per_hour;
};
using PriceLookup = std::function<Result<HardwarePrices>(const std::string& hardware)>;

// Reads dir/run.json when it exists: {"label", "hardware", "training_price_per_hour",
// "serving_price_per_hour", "price_per_hour" (both)}. Unknown keys, wrong types and negative
// prices are errors naming the file, so a typo does not silently drop a price.
Result<RunSpec> LoadRunSpec(const std::string& dir);

// Fills open prices from lookup(spec.hardware) when both are set; what the user gave wins.
Status FillPrices(RunSpec& spec, const PriceLookup& lookup);

}  // namespace gk::report
