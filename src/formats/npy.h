// NumPy .npy (format 1.0) writer for float32 arrays, streamed row by row and written
// atomically. Used to hand full logits to outside checkers (numpy, PyTorch).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/atomic_file.h"

namespace gk {

class NpyWriter {
 public:
  // A C-order float32 array of the given shape; rows are appended with Append.
  static Result<NpyWriter> Create(const std::string& path, const std::vector<int64_t>& shape);
  Status Append(const float* data, int64_t count);
  Status Commit();  // fails unless exactly the declared number of elements was appended

 private:
  NpyWriter(AtomicFile file, int64_t total) : file_(std::move(file)), total_(total) {}
  AtomicFile file_;
  int64_t total_ = 0;
  int64_t written_ = 0;
};

}  // namespace gk
