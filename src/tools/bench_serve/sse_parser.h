// Server-sent events (the WHATWG event-stream format) as OpenAI-compatible servers stream them:
// events end at a blank line; "data:" lines (one optional space after the colon) are joined
// with "\n"; lines starting with ':' are comments (keep-alive pings); \n, \r\n and \r all end a
// line. vLLM's client splits on "\n\n" and strips "data: ", which agrees for every server we
// know; this parser also takes CRLF streams and multi-line data.
#pragma once

#include <string>
#include <string_view>

namespace gk::bench {

class SseParser {
 public:
  // Feeds bytes as they arrive; calls on_data(data) for each complete event that had data.
  template <class F>
  void Feed(std::string_view bytes, F&& on_data) {
    for (char ch : bytes) {
      if (skip_lf_) {
        skip_lf_ = false;
        if (ch == '\n') continue;
      }
      if (ch == '\r' || ch == '\n') {
        skip_lf_ = ch == '\r';
        if (EndLine()) on_data(std::string_view(data_));
        continue;
      }
      line_.push_back(ch);
    }
  }
  // Bytes of an unfinished event (a stream that ends mid-event is malformed).
  bool pending() const { return !line_.empty() || has_data_; }

 private:
  // Returns true when the line completed an event with data (in data_).
  bool EndLine();

  std::string line_, data_;
  bool has_data_ = false, skip_lf_ = false, emitted_ = false;
};

}  // namespace gk::bench
