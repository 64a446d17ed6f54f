// The Markdown twin of the page: the same tables, the charts as SVG files beside it.
#include <string>

#include "tools/report/format.h"
#include "tools/report/report.h"

namespace gk::report {
namespace {

// A cell's text: '|' would end the cell, a newline the row, '<' start an HTML tag.
std::string Cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '|': out += "\\|"; break;
      case '\n': out += ' '; break;
      case '<': out += "&lt;"; break;  // a label like "<b>" is text, not HTML, in a Markdown viewer
      case '>': out += "&gt;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string TableMd(const Table& t) {
  std::string out = "**" + Cell(t.title) + "**\n\n|";
  for (const std::string& h : t.header) out += " " + Cell(h) + " |";
  out += "\n|";
  for (size_t i = 0; i < t.header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (const std::string& c : row) out += " " + Cell(c) + " |";
    out += "\n";
  }
  if (!t.note.empty()) out += "\n" + t.note + "\n";
  return out + "\n";
}

}  // namespace

std::string RenderMarkdown(const Report& r, const std::string& figure_prefix) {
  std::string out = "# " + Cell(r.title) + "\n\nWritten by gemmakit report; every number comes from the runs' artifacts and "
                    "the given prices.\n\n";
  for (const Section& s : r.sections) {
    out += "## " + Cell(s.title) + "\n\n";
    for (const Table& t : s.tables) out += TableMd(t);
    for (const Figure& f : s.figures) {
      out += f.svg.empty() ? Cell(f.title) + ": " + kNotMeasured + "\n\n"
                           : "![" + Cell(f.title) + "](" + figure_prefix + f.file + ")\n\n";
    }
  }
  return out;
}

}  // namespace gk::report
