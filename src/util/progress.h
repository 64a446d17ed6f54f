// Progress of a long conversion (merge, convert, quantize: minutes on a 31B checkpoint) on
// stderr, the way `train` shows its steps. On a terminal a bar redrawn in place: bytes and
// tensors done, rate, time left. Otherwise (a log file, CI) a line per output file written,
// and one per tenth of the bytes so that a single large file (GGUF, an Orbax step) is not
// silent for minutes.
//
// Writers call the tracked fills from one thread or several; the counters are locked.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

#include "util/result.h"

namespace gk {

class ConversionProgress {
 public:
  using Fill = std::function<Status(uint8_t* dst, size_t nbytes)>;

  // what: a short label ("merge", "convert hf -> gguf"); out: stderr unless given (tests).
  // tty: draw the bar (default: whether `out` is a terminal).
  explicit ConversionProgress(std::string what, std::FILE* out = nullptr, int tty = -1);
  ~ConversionProgress();

  // Work the writer has planned: bytes it will write and tensors it will fill. A conversion in
  // two phases (Orbax -> HF -> GGUF) adds both before the first starts, or each as it comes.
  void AddWork(uint64_t bytes, int64_t tensors);
  // The same fill, counting its bytes and one tensor when it succeeds.
  Fill Track(Fill fill);
  void TensorDone(uint64_t bytes);
  void FileDone(const std::string& path);
  // The last line: totals, time, rate (and the bar's newline).
  void Finish();

 private:
  void Draw(bool force);  // locked by the caller
  std::string Totals() const;

  std::string what_;
  uint64_t total_bytes_;
  int64_t total_tensors_;
  std::FILE* out_;
  bool tty_;
  std::mutex mu_;
  uint64_t bytes_ = 0;
  int64_t tensors_ = 0;
  int tenths_reported_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1.23 GB", "512 MB", "37 kB".
std::string HumanBytes(double bytes);
// "1h02m", "3m07s", "12s".
std::string HumanDuration(double seconds);

}  // namespace gk
