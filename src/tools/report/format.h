// How the report prints numbers: fixed decimals, thousands separators, adaptive durations.
// "C" locale, so pages are identical on every machine.
#pragma once

#include <optional>
#include <string>

namespace gk::report {

inline constexpr const char* kNotMeasured = "not measured";
inline constexpr const char* kNoPrice = "no price given";

std::string Fixed(double v, int decimals);          // 0.0720
std::string Grouped(double v, int decimals = 0);    // 1,403 / 9,170,000.5
std::string Duration(double seconds);               // 28.9 s, 12.5 min, 3.34 h
std::string Millis(double ms);                      // 45 ms / 18.71 ms / 1,443 ms
std::string Ratio(double r);                        // 1.61x
std::string Rate(double request_rate);              // "4 req/s", "burst"
std::string Tokens(double n);                       // 9.17M, 5,360 (per hour counts)
// Dollars to the cent as the reference case prints them ($56.11); amounts under a cent keep
// two significant digits ($0.00041), so a small demo's costs do not all read $0.00.
std::string Money(double dollars);

}  // namespace gk::report
