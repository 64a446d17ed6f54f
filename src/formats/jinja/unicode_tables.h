// Unicode facts behind Python's str methods (case mappings, cased/case-ignorable letters for the
// final-sigma rule, printable characters for repr), generated from Python itself by
// unicode_tables_gen.py so that upper/lower/title/repr agree with jinja2 running on that Python.
#pragma once

#include <cstdint>
#include <span>

namespace gk::jinja::unicode {

// The code points first, first + stride, ... <= last.
struct CodeRange {
  char32_t first;
  char32_t last;
  uint32_t stride;
};
// Maps each code point of a CodeRange-like run to itself + delta.
struct CaseRange {
  char32_t first;
  char32_t last;
  uint32_t stride;
  int32_t delta;
};
// A mapping to several code points (U+00DF 'ß' upper -> "SS"), as UTF-8.
struct SpecialCase {
  char32_t code_point;
  const char* utf8;
};

struct Tables {
  std::span<const CodeRange> non_printable, lowercase, uppercase, titlecase, cased, case_ignorable;
  std::span<const CaseRange> upper;
  std::span<const SpecialCase> upper_special;
  std::span<const CaseRange> lower;
  std::span<const SpecialCase> lower_special;
  std::span<const CaseRange> title;
  std::span<const SpecialCase> title_special;
};

const Tables& Get();

}  // namespace gk::jinja::unicode
