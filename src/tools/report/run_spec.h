// Who a RUN_DIR is: its label, hardware name and hourly prices, from an optional
// RUN_DIR/run.json and the command line (docs/REPORT.md "run.json").
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "tools/cost/hardware_catalog.h"
#include "util/result.h"

namespace gk::report {

struct RunSpec {
  std::string dir;                              // the RUN_DIR as given
  std::string label;                            // column heading: run.json, --label, else the dir's name
  std::string hardware;                         // a catalog name ("tpu-v5p-8"), "" when not given
  std::optional<double> training_price_per_hour;  // $/h of the machine that trained
  std::optional<double> serving_price_per_hour;   // $/h of the machine that served
  // For the roofline projection: the model (a preset such as "31b" or a Hugging Face
  // directory; default the training run's model), the mesh over the machine's chips
  // ("fsdp=1,tp=4"; default fsdp = every chip) and the machine itself, resolved from
  // `hardware` through the catalog by the caller.
  std::string model, mesh;
  std::optional<cost::Machine> machine;
};

// Prices of a hardware name, for a catalog (`--hardware NAME`) to fill what run.json and the
// flags left open. Absent fields stay open.
struct HardwarePrices {
  std::optional<double> training_per_hour, serving_per_hour;
};
using PriceLookup = std::function<Result<HardwarePrices>(const std::string& hardware)>;

// Reads dir/run.json when it exists: {"label", "hardware", "training_price_per_hour",
// "serving_price_per_hour", "price_per_hour" (both), "model", "mesh"}. Unknown keys, wrong types and negative
// prices are errors naming the file, so a typo does not silently drop a price.
Result<RunSpec> LoadRunSpec(const std::string& dir);

// Fills open prices from lookup(spec.hardware) when both are set; what the user gave wins.
Status FillPrices(RunSpec& spec, const PriceLookup& lookup);

}  // namespace gk::report
