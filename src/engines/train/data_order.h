// Which rows each optimizer step trains on. The order is a function of (seed, epoch) only, so
// a resumed run recomputes it from the step number: no data position beyond the step needs
// saving, and two runs with the same seed see the same rows in the same order.
//   epoch e: rows permuted by Fisher-Yates over std::mt19937_64(MixKey(seed, e)) (identity when
//            shuffling is off);
//   step s:  epoch s / steps_per_epoch, rows [k·n, (k+1)·n) of that epoch's order with
//            k = s % steps_per_epoch and n = micro_batch · grad_accum;
//   steps_per_epoch = floor(rows / n): the last partial step of an epoch is dropped (the
//            reference case: 9,959 rows / 8 = 1,244 steps).
#pragma once

#include <cstdint>
#include <vector>

namespace gk::train {

class DataOrder {
 public:
  DataOrder(int64_t rows, int64_t rows_per_step, uint64_t seed, bool shuffle);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // The row indices of optimizer step s (rows_per_step of them).
  std::vector<int64_t> StepRows(int64_t step);
  int64_t EpochOf(int64_t step) const { return step / steps_per_epoch_; }

 private:
  void BuildEpoch(int64_t epoch);

  int64_t rows_, rows_per_step_, steps_per_epoch_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace gk::train
