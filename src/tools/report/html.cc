// The HTML page: inline CSS and inline SVG only, so it opens offline, from a mail attachment or
// a CI artifact store; every text from an artifact is escaped.
#include <string>

#include "tools/plot/svg_plot.h"
#include "tools/report/format.h"
#include "tools/report/report.h"

namespace gk::report {
namespace {

constexpr const char* kStyle = R"(body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
nav{margin-bottom:1em}nav a{margin-right:1em}
table{border-collapse:collapse;margin:1em 0}caption{text-align:left;font-weight:bold;padding:.3em 0}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.nm{color:#888;font-style:italic}
p.note{color:#555;font-size:.9em;margin-top:-.5em}
figure{margin:1em 0}figure svg{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.9em}p.missing{color:#888;font-style:italic}
)";

std::string Esc(const std::string& s) { return plot::XmlEscape(s); }

bool Missing(const std::string& cell) {
  return cell.rfind(kNotMeasured, 0) == 0 || cell == kNoPrice || cell == "not given";
}

std::string TableHtml(const Table& t) {
  std::string out = "<table>\n<caption>" + Esc(t.title) + "</caption>\n<thead><tr>";
  for (const std::string& h : t.header) out += "<th>" + Esc(h) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (const std::string& cell : row) out += (Missing(cell) ? "<td class=\"nm\">" : "<td>") + Esc(cell) + "</td>";
    out += "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
  if (!t.note.empty()) out += "<p class=\"note\">" + Esc(t.note) + "</p>\n";
  return out;
}

std::string FigureHtml(const Figure& f) {
  if (f.svg.empty()) return "<p class=\"missing\">" + Esc(f.title) + ": " + kNotMeasured + "</p>\n";
  return "<figure>\n" + f.svg + "<figcaption>" + Esc(f.title) + "</figcaption>\n</figure>\n";
}

}  // namespace

std::string RenderHtml(const Report& r) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + Esc(r.title) +
                    "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n<h1>" + Esc(r.title) + "</h1>\n<nav>";
  for (const Section& s : r.sections) out += "<a href=\"#" + s.id + "\">" + Esc(s.title) + "</a>";
  out += "</nav>\n<p class=\"note\">Written by gemmakit report; every number comes from the runs' artifacts and the "
         "given prices.</p>\n";
  for (const Section& s : r.sections) {
    out += "<section id=\"" + s.id + "\">\n<h2>" + Esc(s.title) + "</h2>\n";
    for (const Table& t : s.tables) out += TableHtml(t);
    for (const Figure& f : s.figures) out += FigureHtml(f);
    out += "</section>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace gk::report
