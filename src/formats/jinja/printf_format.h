// Python's printf-style string formatting, `'%s: %d' % (name, n)`, which jinja2 inherits from
// Python's str. Supports the conversions s r a d i u o x X e E f F g G c %, flags -+ #0, width,
// precision (also *), and %(key)s with a dict. Literal parts keep the format string's origin;
// each converted value keeps its own (a padded or numeric conversion of data is data).
#pragma once

#include <cstddef>

#include "formats/jinja/value.h"

namespace gk::jinja {

Result<Value> PrintfFormat(const Value& format, const Value& args, size_t max_bytes);

}  // namespace gk::jinja
