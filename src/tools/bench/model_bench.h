// `gemmakit bench model`: prefill and decode speed of a checkpoint, each printed with the
// ceiling measured in the same run and the ratio to it.
//   decode ceiling  = read bandwidth / weight bytes streamed per token
//   prefill ceiling = FLOP rate / (2 × weights used per token), the output head counted once
//                     per prompt (only the last position's logits are computed); attention
//                     FLOPs are not counted; also printed against the sgemm rate measured
//                     in the run, the matrix-product rate a CPU without bf16 dot products has
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/quantize.h"
#include "model/tensor_parallel.h"
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
  QuantType quantize = QuantType::kNone;
  int batch = 16;  // sequences decoded together for the batched-decode figure (0: skip)
  uint64_t bandwidth_buffer_bytes = 1ull << 30;
  // Tensor parallelism (`mpirun -np N ... --tp N`): every rank runs the benchmark on its share;
  // with tp_baseline, rank 0 then loads the whole model and runs alone for the scaling figure.
  TensorParallel tp;
  bool tp_baseline = true;
};

struct ModelBenchResult {
  std::string model_dir, arch, weight_dtype, isa, load_mode;
  int threads = 0, prompt_len = 0, gen_len = 0;
  double params_b = 0;
  double load_seconds = 0;
  double bytes_per_token = 0;      // weight bytes streamed per decoded token
  double flops_per_token = 0;      // prefill: 2 × weights used per token (head once per prompt)
  std::string activations;         // bf16 activations in the dot-product kernels: split or round
  std::string weight_format;       // as stored in memory: bf16 packed, bf16, f32, q8_0
  double prefill_tok_s = 0, decode_tok_s = 0;  // medians
  int batch = 0;
  double batch_decode_tok_s = 0;   // all sequences together
  double batch_speedup = 0;        // ÷ decode_tok_s
  double batch_compute_ratio = 0;  // batched FLOP/s ÷ the peak of the kernel's instruction type
  Ceilings ceilings;
  double decode_ratio = 0;         // decode tok/s ÷ (read bandwidth / bytes per token)
  double prefill_ratio_fp32 = 0;   // prefill FLOP/s ÷ fp32 FMA peak
  double prefill_ratio_bf16 = 0;   // prefill FLOP/s ÷ bf16 dot peak
  double prefill_ratio_sgemm = 0;  // prefill FLOP/s ÷ sgemm rate (ceilings.h)
  double prefill_ratio_onednn = 0;  // prefill FLOP/s ÷ oneDNN bf16 matmul rate (AVX-512 BF16 only)
  // Tensor parallelism: figures above are the group's (ceilings and bytes per token: one rank's).
  int tp = 1;
  std::string comm_backend;
  double comm_bytes_per_decode_token = 0;  // one rank's payload handed to collectives per token
  double alone_prefill_tok_s = 0, alone_decode_tok_s = 0;  // the whole model on rank 0 alone (0: not run)
};

Result<ModelBenchResult> RunModelBench(const ModelBenchOptions& options);
std::string FormatModelBench(const ModelBenchResult& r);
nlohmann::json ModelBenchToJson(const ModelBenchResult& r);

}  // namespace gk
