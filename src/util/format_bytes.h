// Byte counts for people: what error lines and tables print ("57.18 GiB").
#pragma once

#include <cstdio>
#include <cstdint>
#include <string>

namespace gk {

// bytes in GiB with two decimals and the unit.
inline std::string GiBText(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(uint64_t(1) << 30));
  return buf;
}

}  // namespace gk
