#include "engines/train/data_order.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "kernels/train_ops.h"

namespace gk::train {

DataOrder::DataOrder(int64_t rows, int64_t rows_per_step, uint64_t seed, bool shuffle)
    : rows_(rows), rows_per_step_(std::max<int64_t>(1, rows_per_step)),
      steps_per_epoch_(std::max<int64_t>(1, rows / std::max<int64_t>(1, rows_per_step))), seed_(seed),
      shuffle_(shuffle) {}

void DataOrder::BuildEpoch(int64_t epoch) {
  order_.resize(size_t(rows_));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  if (shuffle_) {
    // Fisher-Yates with our own index draws: std::shuffle's use of the engine is unspecified.
    std::mt19937_64 rng(MixKey(seed_, uint64_t(epoch)));
    for (int64_t i = rows_ - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[size_t(rng() % uint64_t(i + 1))]);
  }
  epoch_ = epoch;
}

std::vector<int64_t> DataOrder::StepRows(int64_t step) {
  const int64_t epoch = step / steps_per_epoch_, k = step % steps_per_epoch_;
  if (epoch != epoch_) BuildEpoch(epoch);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rows_per_step_; ++i) out.push_back(order_[size_t((k * rows_per_step_ + i) % rows_)]);
  return out;
}

}  // namespace gk::train
