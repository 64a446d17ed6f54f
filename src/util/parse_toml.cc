#include "util/parse_toml.h"

#include "util/guarded_parse.h"

namespace gk {

Result<toml::table> ParseToml(std::string_view text, const std::string& origin) {
  return GuardedParse(origin, [&]() -> Result<toml::table> {
    try {
      return toml::parse(text, origin);
    } catch (const toml::parse_error& e) {  // for its position; GuardedParse takes the rest
      const toml::source_position& b = e.source().begin;
      return Status::Error(StrCat(origin, ":", b.line, ":", b.column, ": ", OneLine(e.description(), 400)));
    }
  });
}

}  // namespace gk
