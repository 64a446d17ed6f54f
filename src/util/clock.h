// Wall-clock seconds and the median, for the timings of generation and benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace gk {

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace gk
