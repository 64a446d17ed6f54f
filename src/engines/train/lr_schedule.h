// Learning-rate schedules, identical to optax's (optax/schedules/_schedule.py).
#pragma once

#include <cstdint>

namespace gk::train {

// optax.warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
// end_value, exponent): linear from init to peak over warmup_steps, then cosine from peak to
// end over decay_steps - warmup_steps (decay_steps counts the warm-up, as in optax), constant
// at end_value afterwards. `step` is the number of optimizer updates already taken (optax
// evaluates the schedule at the update's count, starting at 0: the first update uses
// init_value). decay_steps <= warmup_steps, where optax raises, gives end_value from
// warmup_steps on.
struct WarmupCosineDecay {
  double init_value = 0.0;
  double peak_value = 1e-4;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;
  double end_value = 0.0;
  double exponent = 1.0;

  double operator()(int64_t step) const;
};

}  // namespace gk::train
