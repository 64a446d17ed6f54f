#include "kernels/moe_routing.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/ops.h"

namespace gk {

void RouteToken(float* probs, int64_t E, int64_t k, const float* per_expert_scale, int32_t* top, float* weight,
                int32_t* idx) {
  SoftmaxInPlace(probs, E);
  std::iota(idx, idx + E, 0);
  std::partial_sort(idx, idx + k, idx + E,
                    [&](int32_t a, int32_t z) { return probs[a] > probs[z] || (probs[a] == probs[z] && a < z); });
  float total = 0.f;
  for (int64_t j = 0; j < k; ++j) total += probs[idx[j]];
  for (int64_t j = 0; j < k; ++j) {
    top[j] = idx[j];
    weight[j] = probs[idx[j]] / total * per_expert_scale[idx[j]];
  }
}

void RouteTokenBackward(const float* probs, int64_t E, int64_t k, const int32_t* top, const float* weight,
                        const float* dw, const float* per_expert_scale, float* dz) {
  std::fill(dz, dz + E, 0.f);
  double total = 0, dot = 0;
  for (int64_t j = 0; j < k; ++j) total += probs[top[j]];
  for (int64_t j = 0; j < k; ++j) dot += double(dw[j]) * weight[j];
  double pdp = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t ex = top[j];
    const double dp = (double(dw[j]) * per_expert_scale[ex] - dot) / total;
    dz[ex] = float(dp);
    pdp += double(probs[ex]) * dp;
  }
  for (int64_t ex = 0; ex < E; ++ex) dz[ex] = float(double(probs[ex]) * (double(dz[ex]) - pdp));
}

void GroupSlotsByExpert(const int32_t* top, int64_t n, int64_t E, int64_t* expert_begin, int32_t* order) {
  std::fill(expert_begin, expert_begin + E + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++expert_begin[top[i] + 1];
  std::partial_sum(expert_begin, expert_begin + E + 1, expert_begin);
  std::vector<int64_t> next(expert_begin, expert_begin + E);
  for (int64_t i = 0; i < n; ++i) order[next[size_t(top[i])]++] = int32_t(i);
}

}  // namespace gk
