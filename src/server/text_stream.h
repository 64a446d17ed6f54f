// The text of one generated choice, delta by delta: token ids are detokenized with the
// tokenizer's StreamingDecoder (a multi-byte character split over byte tokens comes out whole),
// stop strings are looked for in the decoded text (across token boundaries), and text that could
// still turn out to be the start of a stop string is held back until it cannot.
//
// On a match the output ends just before the stop string (or after it with
// include_stop_str_in_output), and nothing is emitted after it, as vLLM does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tokenizer.h"

namespace gk::server {

// The pure part, independent of any tokenizer: text in, emitted text out.
class StopStringFilter {
 public:
  StopStringFilter(std::vector<std::string> stops, bool include_stop_in_output);

  // Appends new decoded text; returns the text that can be emitted now.
  std::string Add(const std::string& text);
  // End of generation: returns whatever was held back (empty after a stop).
  std::string Finish();

  bool stopped() const { return stopped_; }
  const std::string& matched_stop() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  std::string pending_;  // decoded, not yet emitted
  bool stopped_ = false;
  std::string matched_;
};

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, bool skip_special, std::vector<std::string> stops,
             bool include_stop_in_output);

  // Feeds one generated token; returns the text that can be emitted now. After a stop string
  // matched, returns "" (stopped() is true).
  std::string Add(int32_t token);
  // End of generation: the held-back text (an unfinished character becomes U+FFFD).
  std::string Finish();

  bool stopped() const { return filter_.stopped(); }
  const std::string& matched_stop() const { return filter_.matched_stop(); }
  // Bytes of decoded text before the last token passed to Add (for legacy text_offset).
  size_t decoded_before_last() const { return decoded_before_last_; }

 private:
  StreamingDecoder decoder_;
  StopStringFilter filter_;
  size_t decoded_ = 0, decoded_before_last_ = 0;
};

}  // namespace gk::server
