// `gemmakit bench train --device cuda`: tokens/s of LoRA training steps on one GPU
// (CudaTrainingModel: a packed micro-batch of `rows` rows of seq_len random tokens, loss on
// every token, forward + remat + backward, then the gradients to the host and the factors back
// as the trainer's step does), with the model FLOPs utilisation against cuBLASLt's bf16 GEMM
// rate measured in the same run (useful FLOPs: tools/bench/train_bench.h's CountTrainFlops), and
// the device memory the run used beside `gemmakit plan`'s estimate of it. `--preset` builds
// random weights on the GPU, so the 31B shape needs no checkpoint. A run that would not fit is
// refused before the first step with both numbers.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "util/result.h"

namespace gk {

struct GpuTrainBenchOptions {
  std::string model_dir;   // a checkpoint, or
  std::string preset;      // a preset's shape with random bf16 weights
  int num_layers = 0;      // with preset: its first N layers only (0: all)
  int device = 0;
  int seq_len = 3072;
  int rows = 1;            // rows per micro-batch (packed)
  int rank = 64;
  double alpha = 64;
  int steps = 3;           // timed steps, after one warm-up step
  std::string precision = "bf16";  // "bf16" | "f32"
};

Result<nlohmann::json> RunGpuTrainBench(const GpuTrainBenchOptions& o);
std::string FormatGpuTrainBench(const nlohmann::json& r);

}  // namespace gk
