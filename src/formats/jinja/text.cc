// Strings with per-byte origin, stored as runs (see text.h).
#include "formats/jinja/text.h"

#include <algorithm>

namespace gk::jinja {

Text::Text(std::string bytes, bool from_template) : bytes_(std::move(bytes)) {
  if (!bytes_.empty()) runs_.push_back({bytes_.size(), from_template});
}

bool Text::AllTemplate() const {
  return std::all_of(runs_.begin(), runs_.end(), [](const Run& r) { return r.from_template; });
}

void Text::Append(std::string_view bytes, bool from_template) {
  if (bytes.empty()) return;
  bytes_.append(bytes);
  if (!runs_.empty() && runs_.back().from_template == from_template) {
    runs_.back().length += bytes.size();
  } else {
    runs_.push_back({bytes.size(), from_template});
  }
}

void Text::Append(const Text& other) {
  size_t offset = 0;
  for (const Run& run : other.runs_) {
    Append(std::string_view(other.bytes_).substr(offset, run.length), run.from_template);
    offset += run.length;
  }
}

Text Text::Substr(size_t pos, size_t length) const {
  Text out;
  if (pos >= bytes_.size()) return out;
  const size_t end = length >= bytes_.size() - pos ? bytes_.size() : pos + length;
  size_t run_start = 0;
  for (const Run& run : runs_) {
    const size_t run_end = run_start + run.length;
    const size_t from = std::max(run_start, pos);
    const size_t to = std::min(run_end, end);
    if (from < to) out.Append(std::string_view(bytes_).substr(from, to - from), run.from_template);
    if (run_end >= end) break;
    run_start = run_end;
  }
  return out;
}

bool Text::FromTemplateAt(size_t pos) const {
  size_t run_start = 0;
  for (const Run& run : runs_) {
    if (pos < run_start + run.length) return run.from_template;
    run_start += run.length;
  }
  return false;
}

}  // namespace gk::jinja
