#include "server/text_stream.h"

#include <algorithm>
#include <utility>

namespace gk::server {

StopStringFilter::StopStringFilter(std::vector<std::string> stops, bool include_stop_in_output)
    : include_stop_(include_stop_in_output) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopStringFilter::Add(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  if (stops_.empty()) return std::exchange(pending_, std::string());
  // The earliest match wins (ties: the longer stop string). A match cannot start in text already
  // emitted: any suffix that could begin a stop string was held back.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t p = pending_.find(s);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && s.size() > best_stop->size())) {
      best = p;
      best_stop = &s;
    }
  }
  if (best_stop) {
    stopped_ = true;
    matched_ = *best_stop;
    std::string out = pending_.substr(0, include_stop_ ? best + best_stop->size() : best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Stop strings are
  // valid UTF-8, so such a suffix starts on a character boundary and the emitted part is whole.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::Finish() {
  if (stopped_) return "";
  return std::exchange(pending_, std::string());
}

TextStream::TextStream(const Tokenizer& tokenizer, bool skip_special, std::vector<std::string> stops,
                       bool include_stop_in_output)
    : decoder_(tokenizer, skip_special), filter_(std::move(stops), include_stop_in_output) {}

std::string TextStream::Add(int32_t token) {
  decoded_before_last_ = decoded_;
  if (filter_.stopped()) return "";
  const std::string text = decoder_.Add(token);
  decoded_ += text.size();
  return filter_.Add(text);
}

std::string TextStream::Finish() {
  if (filter_.stopped()) return "";
  const std::string rest = decoder_.Flush();
  decoded_ += rest.size();
  std::string out = filter_.Add(rest);
  if (filter_.stopped()) return out;
  return out + filter_.Finish();
}

}  // namespace gk::server
