// TOML (toml++) parsing for outside input: a syntax error becomes "<origin>:<line>:<column>:
// <description>", and anything else toml++ throws is turned into an error by GuardedParse
// (util/guarded_parse.h). Training recipes and the hardware catalog both parse through here.
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "util/result.h"

namespace gk {

Result<toml::table> ParseToml(std::string_view text, const std::string& origin);

}  // namespace gk
