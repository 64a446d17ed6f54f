#include "engines/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gk::train {

// A transcription of optax's join_schedules([linear_schedule(init, peak, warmup),
// cosine_decay_schedule(peak, decay_steps - warmup, alpha, exponent)], [warmup]).
double WarmupCosineDecay::operator()(int64_t step) const {
  step = std::max<int64_t>(step, 0);
  if (step < warmup_steps) {
    // linear_schedule's (init - peak)·(1 - t/T) + peak, rearranged so that step 0 gives
    // init_value exactly (optax's order cancels: 1e-6 - 1e-3 + 1e-3 is 84 ulp off 1e-6).
    // warmup_steps <= 0 never gets here, as in optax, where the join hands step 0 onwards to
    // the cosine part.
    return init_value + (peak_value - init_value) * (double(step) / double(warmup_steps));
  }
  const int64_t cosine_steps = decay_steps - warmup_steps;
  // optax raises for a cosine part of no length; a schedule shorter than its warm-up ends at
  // end_value instead, so a run cut short by max_steps still has a defined rate.
  if (cosine_steps <= 0) return end_value;
  // optax expresses end_value as alpha = end/peak (0 when peak is 0) and returns
  // peak·((1-alpha)·c^exponent + alpha); kept in that form so that peak = 0 gives 0 as
  // optax does, not end_value.
  const double alpha = peak_value == 0.0 ? 0.0 : end_value / peak_value;
  const double t = double(std::min(step - warmup_steps, cosine_steps));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * t / double(cosine_steps)));
  return peak_value * ((1.0 - alpha) * std::pow(cosine, exponent) + alpha);
}

}  // namespace gk::train
