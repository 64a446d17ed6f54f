// `gemmakit bench model --device cuda`: prefill, single-sequence decode, batched decode and the
// reference case's burst (B prompts at once, then their decodes) of the CUDA runner, each printed
// beside the limit measured in the same run (kernels/cuda/device_limits.h):
//   decode          tokens/s × weight bytes per token  ÷ device-to-device copy bandwidth
//   prefill         tokens/s × 2 × weights per token   ÷ cuBLASLt's bf16 GEMM rate
//   batched, burst  tokens/s ÷ the same passes' ceiling: each step the weights and every row's
//                   KV at the copy bandwidth or its products at the GEMM rate, whichever is
//                   slower (tools/bench/burst_ceiling.h)
// (attention FLOPs are not counted, as in the CPU's bench model). It also prints the ceiling of
// the reference case's burst on this GPU, which says whether that goal can be reached at all.
// `--preset` builds random weights in GPU memory, so a 31B-shaped run needs no checkpoint on disk.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "util/result.h"

namespace gk {

struct GpuModelBenchOptions {
  std::string model_dir;     // a checkpoint, or
  std::string preset;        // a preset's shape with random bf16 weights
  int num_layers = 0;        // with preset: its first N layers only (0: all)
  int device = 0;
  int prompt_len = 4096;     // the prefill figure's prompt
  int gen_len = 128;         // decoded tokens per figure
  int batch = 64;            // sequences of the batched and burst figures (0: skip them)
  int batch_prompt = 128;    // each batched sequence's prompt
  int repeats = 3;           // medians over this many runs
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;   // false: --enforce-eager
  bool flash_prefill = false;  // prefill attention through the fused kernel, not cuBLASLt products
  bool gemv_decode = false;    // decode steps' products through the GEMV kernel, not cuBLASLt
  bool batch_invariant = false;  // CudaModelOptions::batch_invariant (--batch-invariant): what it costs
};

// The figures as JSON (every number the table prints, and the limits).
Result<nlohmann::json> RunGpuModelBench(const GpuModelBenchOptions& o);
std::string FormatGpuModelBench(const nlohmann::json& r);

}  // namespace gk
