// The reference case's measured figures (../shared/paper/FACTS.md §3, §5) that `gemmakit plan
// --project` prints beside its roofline projections. They are what the projection is checked
// against; nothing in the projection is fitted to them.
#pragma once

#include <string>
#include <vector>

namespace gk::plan {

struct MeasuredTraining {
  const char* machine;
  const char* mesh;      // as the reference ran it
  double tokens_per_s;
  const char* source;
};
struct MeasuredDecode {
  const char* machine;
  const char* kv_cache_dtype;
  int input_len, output_len;
  double median_tpot_ms, median_ttft_ms;
  const char* source;
};

inline const std::vector<MeasuredTraining>& ReferenceTraining() {
  static const std::vector<MeasuredTraining> v = {
      {"tpu-v5p-8", "fsdp=1,tp=4", 763, "FACTS §3 (LoRA r64, remat, micro-batch 1, max_seq_len 3072)"},
      {"a3-highgpu-2g", "fsdp=2,tp=1", 486, "FACTS §3 (LoRA r64, FSDP over 2 GPUs)"},
  };
  return v;
}

// TTFT and TPOT at 4 requests/s (FACTS §5, "by context length"); ~16k taken as 16384.
inline const std::vector<MeasuredDecode>& ReferenceDecode() {
  static const std::vector<MeasuredDecode> v = {
      {"tpu-v6e-8", "fp8", 4096, 512, 23.9, 61, "FACTS §5"},
      {"tpu-v6e-8", "fp8", 8192, 512, 31, 1013, "FACTS §5"},
      {"tpu-v6e-8", "fp8", 16384, 512, 13.5, 62, "FACTS §5"},
      {"a3-highgpu-2g", "bf16", 4096, 512, 31.2, 1443, "FACTS §5"},
      {"a3-highgpu-2g", "bf16", 8192, 512, 45, 7202, "FACTS §5"},
      {"a3-highgpu-2g", "bf16", 16384, 512, 19, 99, "FACTS §5"},
  };
  return v;
}

}  // namespace gk::plan
