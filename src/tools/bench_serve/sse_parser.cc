#include "tools/bench_serve/sse_parser.h"

namespace gk::bench {

bool SseParser::EndLine() {
  if (emitted_) {  // the previous call handed out data_: start the next event afresh
    data_.clear();
    emitted_ = false;
  }
  if (line_.empty()) {  // blank line: dispatch
    if (!has_data_) return false;
    has_data_ = false;
    emitted_ = true;
    return true;
  }
  std::string_view line(line_);
  if (line.front() != ':') {
    const size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    }  // event:, id:, retry: carry nothing the benchmark needs
  }
  line_.clear();
  return false;
}

}  // namespace gk::bench
