// Test helpers for the Markdown tables of `bench compare` and `eval compare`.
#pragma once

#include <string>
#include <vector>

namespace gk::testing {

inline std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) out.push_back(s.substr(start, nl - start));
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

// The table row whose first cell is `first_cell`, or "" when there is none.
inline std::string RowOf(const std::string& md, const std::string& first_cell) {
  for (const std::string& l : Lines(md)) {
    if (l.rfind("| " + first_cell + " |", 0) == 0) return l;
  }
  return "";
}

}  // namespace gk::testing
