// Splits a template into tokens the way jinja2's lexer does with the settings transformers uses
// (trim_blocks, lstrip_blocks, no keep_trailing_newline): text between tags arrives as kData with
// the whitespace control ({%- -%} {{- -}} {%+ +%}) already applied, comments are dropped, and
// {% raw %} bodies become plain kData. Inside a tag come names, literals and operators.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gk::jinja {

enum class TokenType : uint8_t {
  kData,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  int line = 1;
  std::string value;  // data text, name, decoded string literal or operator symbol
  int64_t int_value = 0;
  double float_value = 0;
};

// Tokens ending in one kEof; errors read "line N: ...".
Result<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace gk::jinja
