// Text: a UTF-8 string whose bytes each remember whether they came from the template source or
// from data (the render context). The renderer builds every string value and its output from
// Text, so the caller can later tokenize template bytes with control tokens and data bytes as
// plain text (no prompt injection through a message that contains "<|turn>").
//
// Origins are stored as runs (length, from_template), adjacent runs of one origin merged, so a
// string of one origin costs one run. Operations keep the origin of every byte they keep; bytes
// computed from data are data. Nothing ever turns data into template.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gk::jinja {

class Text {
 public:
  struct Run {
    size_t length;
    bool from_template;
  };

  Text() = default;
  Text(std::string bytes, bool from_template);
  static Text Template(std::string bytes) { return Text(std::move(bytes), true); }
  static Text Data(std::string bytes) { return Text(std::move(bytes), false); }

  const std::string& bytes() const { return bytes_; }
  const std::vector<Run>& runs() const { return runs_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  // True when every byte came from the template (an empty Text counts as template).
  bool AllTemplate() const;

  void Append(const Text& other);
  void Append(std::string_view bytes, bool from_template);
  // The bytes [pos, pos + length) with their origins; clamps to the end like std::string.
  Text Substr(size_t pos, size_t length = std::string::npos) const;
  // The origin of byte `pos` (pos < size()).
  bool FromTemplateAt(size_t pos) const;

 private:
  std::string bytes_;
  std::vector<Run> runs_;
};

}  // namespace gk::jinja
