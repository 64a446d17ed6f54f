#include "tools/report/format.h"

#include "tools/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gk::report {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return std::string(buf) == "-0" ? "0" : buf;
}

std::string Grouped(double v, int decimals) {
  const std::string s = Fixed(std::fabs(v), decimals);
  const size_t digits = std::min(s.find('.'), s.size());  // of the integer part
  std::string out = v < 0 && s.find_first_not_of("0.") != std::string::npos ? "-" : "";
  for (size_t i = 0; i < digits; ++i) {
    if (i > 0 && (digits - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out + s.substr(digits);
}

std::string Duration(double s) {
  if (s < 120) return Fixed(s, s < 10 ? 2 : 1) + " s";
  if (s < 7200) return Fixed(s / 60, 1) + " min";
  return Fixed(s / 3600, 2) + " h";
}

std::string Millis(double ms) {
  // Three significant digits below 100 ms (18.7, 2.31), whole milliseconds above.
  const int decimals = ms >= 100 ? 0 : ms >= 10 ? 1 : 2;
  return Grouped(ms, decimals) + " ms";
}

std::string Ratio(double r) { return Fixed(r, 2) + "x"; }

std::string Rate(double r) {
  if (std::isinf(r)) return "burst";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g req/s", r);
  return buf;
}

std::string Tokens(double n) {
  if (std::fabs(n) >= 1e6) return Fixed(n / 1e6, 2) + "M";
  return Grouped(n, 0);
}

std::string Money(double x) {
  if (x == 0 || std::fabs(x) >= 0.005) return cost::Dollars(x);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s$%.2g", x < 0 ? "-" : "", std::fabs(x));
  return buf;
}

}  // namespace gk::report
