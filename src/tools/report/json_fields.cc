#include "tools/report/json_fields.h"

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::report {

Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  GK_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseJson(text, path);
}

Result<double> NumberField(const nlohmann::json& j, const std::string& key, const std::string& file) {
  if (!j.is_object() || !j.contains(key)) {
    return Result<double>::Error(StrCat(file, ": field \"", key, "\" is missing"));
  }
  if (!j[key].is_number()) {
    return Result<double>::Error(StrCat(file, ": field \"", key, "\" must be a number, got ", j[key].dump()));
  }
  return j[key].get<double>();
}

Result<std::optional<double>> OptionalNumber(const nlohmann::json& j, const std::string& key, const std::string& file) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::optional<double>();
  if (!j[key].is_number()) {
    return Result<std::optional<double>>::Error(
        StrCat(file, ": field \"", key, "\" must be a number or null, got ", j[key].dump()));
  }
  return std::optional<double>(j[key].get<double>());
}

}  // namespace gk::report
