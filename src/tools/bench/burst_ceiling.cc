#include "tools/bench/burst_ceiling.h"

#include <algorithm>

#include "tools/plan/memory_plan.h"

namespace gk {

double KvBytesReadPerRow(const ModelConfig& c, int64_t context, int kv_elem_bytes) {
  double bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const int src = c.KvSourceLayer(l);  // a layer reading another's KV reads the source's again
    const int64_t positions = c.IsFull(src) ? context : std::min<int64_t>(context, c.sliding_window);
    bytes += double(positions) * double(plan::KvBytesPerTokenLayer(c, src, /*tp=*/1, kv_elem_bytes));
  }
  return bytes;
}

BurstCeiling BurstCeilingOf(const ModelConfig& c, double weight_bytes, double params, double head_params,
                            int kv_elem_bytes, const BurstShape& s, const DeviceRoofline& d) {
  BurstCeiling r;
  const int64_t chunk = s.chunk > 0 ? s.chunk : int64_t(s.sequences) * s.prompt;
  // Prefill: whole prompts side by side, as many as fit a pass (at least one).
  const int per_pass = int(std::max<int64_t>(1, chunk / std::max(s.prompt, 1)));
  for (int done = 0; done < s.sequences;) {
    const int n = std::min(per_pass, s.sequences - done);
    const double flops = n * (2.0 * (params - head_params) * s.prompt + 2.0 * head_params);
    r.prefill_s += std::max(flops / d.flop_per_s, weight_bytes / d.bytes_per_s);
    done += n;
  }
  const double step_flops = s.sequences * 2.0 * params;
  for (int step = 0; step < s.decode_steps; ++step) {
    const double kv = s.sequences * KvBytesReadPerRow(c, int64_t(s.prompt) + step + 1, kv_elem_bytes);
    if (step == 0) r.kv_bytes_first_step = kv;
    r.kv_bytes_last_step = kv;
    r.decode_s += std::max(step_flops / d.flop_per_s, (weight_bytes + kv) / d.bytes_per_s);
  }
  return r;
}

}  // namespace gk
