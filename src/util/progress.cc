#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace gk {

std::string HumanBytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string HumanDuration(double s) {
  char buf[32];
  const long t = std::lround(std::max(0.0, s));
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

ConversionProgress::ConversionProgress(std::string what, std::FILE* out, int tty)
    : what_(std::move(what)), total_bytes_(0), total_tensors_(0), out_(out ? out : stderr),
      tty_(tty < 0 ? isatty(fileno(out_)) != 0 : tty != 0), start_(std::chrono::steady_clock::now()) {
  last_draw_ = start_ - std::chrono::seconds(1);
}

void ConversionProgress::AddWork(uint64_t bytes, int64_t tensors) {
  std::lock_guard<std::mutex> lock(mu_);
  total_bytes_ += bytes;
  total_tensors_ += tensors;
}

ConversionProgress::~ConversionProgress() {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && !finished_ && (bytes_ > 0 || tensors_ > 0)) std::fputc('\n', out_);  // leave the bar's line
}

ConversionProgress::Fill ConversionProgress::Track(Fill fill) {
  return [this, fill = std::move(fill)](uint8_t* dst, size_t n) -> Status {
    Status s = fill(dst, n);
    if (s.ok()) TensorDone(n);
    return s;
  };
}

std::string ConversionProgress::Totals() const {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? double(bytes_) / secs : 0;
  std::string t = StrCat(HumanBytes(double(bytes_)), " / ", HumanBytes(double(total_bytes_)), ", ", tensors_, "/",
                         total_tensors_, " tensors, ", HumanBytes(rate), "/s");
  if (bytes_ < total_bytes_ && rate > 0) t += StrCat(", ", HumanDuration(double(total_bytes_ - bytes_) / rate), " left");
  return t;
}

void ConversionProgress::Draw(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const int width = 24;
  const double frac = total_bytes_ > 0 ? std::min(1.0, double(bytes_) / double(total_bytes_)) : 1.0;
  const int filled = int(frac * width);
  std::fprintf(out_, "\r%s [%s%s] %3.0f%% %s   ", what_.c_str(), std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), 100 * frac, Totals().c_str());
  std::fflush(out_);
}

void ConversionProgress::TensorDone(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ += bytes;
  ++tensors_;
  if (tty_) {
    Draw(false);
    return;
  }
  const int tenths = total_bytes_ > 0 ? int(10 * bytes_ / total_bytes_) : 0;
  if (tenths > tenths_reported_ && tenths < 10) {  // the last tenth is the final line
    tenths_reported_ = tenths;
    std::fprintf(out_, "%s: %d0%%, %s\n", what_.c_str(), tenths, Totals().c_str());
    std::fflush(out_);
  }
}

void ConversionProgress::FileDone(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) {
    Draw(true);
    return;
  }
  std::fprintf(out_, "%s: wrote %s (%s)\n", what_.c_str(), path.c_str(), Totals().c_str());
  std::fflush(out_);
}

void ConversionProgress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    Draw(true);
    std::fputc('\n', out_);
  } else {
    std::fprintf(out_, "%s: done, %s in %s\n", what_.c_str(), Totals().c_str(), HumanDuration(secs).c_str());
  }
  std::fflush(out_);
}

}  // namespace gk
