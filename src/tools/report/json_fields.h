// Reading artifact JSON with errors that name the file and the field.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk::report {

// The whole file parsed; "FILE: malformed JSON: ..." when it is not JSON.
Result<nlohmann::json> ReadJsonFile(const std::string& path);

// j[key] as a number; "FILE: field \"key\" ..." when it is absent or not a number.
Result<double> NumberField(const nlohmann::json& j, const std::string& key, const std::string& file);

// j[key] when it is a number; nothing when absent or null; an error for any other type.
Result<std::optional<double>> OptionalNumber(const nlohmann::json& j, const std::string& key, const std::string& file);

}  // namespace gk::report
