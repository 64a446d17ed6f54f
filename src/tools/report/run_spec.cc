#include "tools/report/run_spec.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::report {
namespace fs = std::filesystem;

namespace {

Result<double> Price(const nlohmann::json& v, const std::string& file, const std::string& key) {
  if (!v.is_number() || v.get<double>() < 0) {
    return Result<double>::Error(StrCat(file, ": \"", key, "\" must be a non-negative number ($ per hour), got ", v.dump()));
  }
  return v.get<double>();
}

Result<RunSpec> LoadRunSpecUnguarded(const std::string& dir) {
  RunSpec spec;
  spec.dir = dir;
  spec.label = fs::path(dir).lexically_normal().filename().string();
  if (spec.label.empty() || spec.label == ".") spec.label = fs::path(dir).lexically_normal().parent_path().filename().string();
  if (spec.label.empty()) spec.label = dir;
  const std::string file = (fs::path(dir) / "run.json").string();
  if (!fs::exists(file)) return spec;
  GK_ASSIGN_OR_RETURN(const std::string text, ReadFile(file));
  GK_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(text, file));
  if (!j.is_object()) return Result<RunSpec>::Error(StrCat(file, ": must be a JSON object"));
  for (const auto& [key, v] : j.items()) {
    if (key == "label" || key == "hardware" || key == "model" || key == "mesh") {
      if (!v.is_string()) return Result<RunSpec>::Error(StrCat(file, ": \"", key, "\" must be a string"));
      (key == "label" ? spec.label : key == "hardware" ? spec.hardware : key == "model" ? spec.model : spec.mesh) =
          v.get<std::string>();
    } else if (key == "training_price_per_hour") {
      GK_ASSIGN_OR_RETURN(spec.training_price_per_hour, Price(v, file, key));
    } else if (key == "serving_price_per_hour") {
      GK_ASSIGN_OR_RETURN(spec.serving_price_per_hour, Price(v, file, key));
    } else if (key == "price_per_hour") {
      GK_ASSIGN_OR_RETURN(const double p, Price(v, file, key));
      if (!j.contains("training_price_per_hour")) spec.training_price_per_hour = p;
      if (!j.contains("serving_price_per_hour")) spec.serving_price_per_hour = p;
    } else {
      return Result<RunSpec>::Error(StrCat(file, ": unknown key \"", key,
                                           "\" (known: label, hardware, training_price_per_hour, "
                                           "serving_price_per_hour, price_per_hour, model, mesh)"));
    }
  }
  if (spec.label.empty()) return Result<RunSpec>::Error(StrCat(file, ": \"label\" is empty"));
  return spec;
}

}  // namespace

// run.json is outside input: whatever parsing it throws is an error (util/guarded_parse.h).
Result<RunSpec> LoadRunSpec(const std::string& dir) {
  return GuardedParse(dir, [&] { return LoadRunSpecUnguarded(dir); });
}

Status FillPrices(RunSpec& spec, const PriceLookup& lookup) {
  if (!lookup || spec.hardware.empty()) return Status::Ok();
  if (spec.training_price_per_hour && spec.serving_price_per_hour) return Status::Ok();
  auto prices = lookup(spec.hardware);
  if (!prices.ok()) return prices.status().Wrap(StrCat("run \"", spec.label, "\" hardware \"", spec.hardware, "\""));
  if (!spec.training_price_per_hour) spec.training_price_per_hour = prices->training_per_hour;
  if (!spec.serving_price_per_hour) spec.serving_price_per_hour = prices->serving_per_hour;
  return Status::Ok();
}

}  // namespace gk::report
