// Test helpers for the SVG writers (svg_plot.h) and their users: a well-formedness check that
// needs no XML library, and a substring count.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace gk::plot::svgtest {

// Starts with <svg, ends with </svg>\n, tags balance, no '<' inside a tag, no bare '>' outside
// one, quotes pair up inside tags, and every '&' starts one of the five entities XmlEscape writes.
inline ::testing::AssertionResult WellFormed(const std::string& svg) {
  if (svg.rfind("<svg", 0) != 0) return ::testing::AssertionFailure() << "does not start with <svg";
  if (svg.size() < 7 || svg.compare(svg.size() - 7, 7, "</svg>\n") != 0) {
    return ::testing::AssertionFailure() << "does not end with </svg>";
  }
  std::vector<std::string> open;
  for (size_t i = 0; i < svg.size(); ++i) {
    if (svg[i] == '&') {
      const size_t semi = svg.find(';', i);
      const std::string ent = svg.substr(i, semi == std::string::npos ? 1 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        return ::testing::AssertionFailure() << "bad entity at " << i;
      }
    }
    if (svg[i] == '>') return ::testing::AssertionFailure() << "bare '>' in text at " << i;
    if (svg[i] != '<') continue;
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    const std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag.empty()) return ::testing::AssertionFailure() << "empty tag at " << i;
    if (tag.find('<') != std::string::npos) return ::testing::AssertionFailure() << "'<' inside tag at " << i;
    const bool closing = tag[0] == '/';
    const std::string name = tag.substr(closing, tag.find_first_of(" />", 1) - closing);
    if (closing) {
      if (open.empty() || open.back() != name) return ::testing::AssertionFailure() << "mismatched </" << name << ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(name);
    }
    if (std::count(tag.begin(), tag.end(), '"') % 2) {  // attribute values are "..." quoted
      return ::testing::AssertionFailure() << "unbalanced quotes in tag at " << i;
    }
    i = end;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> not closed";
  return ::testing::AssertionSuccess();
}

inline size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace gk::plot::svgtest
