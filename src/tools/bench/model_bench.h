// `gemmakit bench model`: prefill and decode speed of a checkpoint, each printed with the
// ceiling measured in the same run and the ratio to it.
//   decode ceiling  = read bandwidth / weight bytes streamed per token
//   prefill ceiling = FLOP rate / (2 × weights used per token), the output head counted once
//                     per prompt (only the last position's logits are computed); attention
//                     FLOPs are not counted
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/weights.h"
#include "tools/bench/ceilings.h"
#include "util/result.h"

namespace gk {

struct ModelBenchOptions {
  std::string model_dir;
  int threads = 0;
  int prompt_len = 512;
  int gen_len = 128;
  int repeats = 3;
  WeightLoadMode load_mode = WeightLoadMode::kCopy;
  uint64_t bandwidth_buffer_bytes = 1ull << 30;
};

struct ModelBenchResult {
  std::string model_dir, arch, weight_dtype, isa, load_mode;
  int threads = 0, prompt_len = 0, gen_len = 0;
  double params_b = 0;
  double load_seconds = 0;
  double bytes_per_token = 0;      // weight bytes streamed per decoded token
  double flops_per_token = 0;      // prefill: 2 × weights used per token (head once per prompt)
  double prefill_tok_s = 0, decode_tok_s = 0;  // medians
  Ceilings ceilings;
  double decode_ratio = 0;         // decode tok/s ÷ (read bandwidth / bytes per token)
  double prefill_ratio_fp32 = 0;   // prefill FLOP/s ÷ fp32 FMA peak
  double prefill_ratio_bf16 = 0;   // prefill FLOP/s ÷ bf16 dot peak
};

Result<ModelBenchResult> RunModelBench(const ModelBenchOptions& options);
std::string FormatModelBench(const ModelBenchResult& r);
nlohmann::json ModelBenchToJson(const ModelBenchResult& r);

}  // namespace gk
