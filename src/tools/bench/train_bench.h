// `gemmakit bench train`: tokens/s of one LoRA (or, with full, full fine-tuning) training step (TrainingModel::ForwardBackward
// over one row of T random tokens, loss on every token), printed as a ratio to the machine's
// fp32 FMA peak measured in the same run (the trainer computes in f32 through sgemm: OpenBLAS, or oneDNN on AVX-512 CPUs), with the activation memory kept for the backward
// pass (with and without per-layer recomputation, `remat`). Under mpirun, data parallel: the
// scaling of N ranks against one.
//
// FLOPs per step, two counts (CountTrainFlops; P = parameters of a frozen matrix, Pl = r·in +
// out·r of a LoRA module, H head dim, N query heads, T tokens, R = T − 1 loss rows):
//   useful   (the formula: what the model's math needs, no recomputation)
//     frozen matrices   4·P·T   forward 2·P·T + input gradient 2·P·T (no weight gradient),
//                               every layer matrix and the tied head (V·D) once, the
//                               embedding lookup free
//     LoRA              6·Pl·T  forward 2·Pl·T + input and weight gradients 4·Pl·T
//     attention         per layer and head 4·H·pairs forward (QKᵀ and PV over the visible
//                       (query, key) pairs: causal on full layers, windowed on sliding ones) and
//                       2.5× that backward (FlashAttention's count: S recomputed, dP, dQ, dK,
//                       dV: 5 products against the forward's 2) → 14·H·pairs
//   executed (what training_model.cc / training_layer.cc / training_attention.cc run)
//     layer matrices    4·P·T, plus 2·P·T more with remat (each layer's forward runs twice)
//     head              2 × 2·V·D·R (LoRA): each chunk's logits once, and the dh = dz·E product
//                       accumulated in the same pass (target rows only, vocabulary in chunks);
//                       full fine-tuning 4 × 2·V·D·R (the logits again, and dE = dzᵀ·h)
//     LoRA              6·Pl·T, plus 2·Pl·T with remat
//     attention         blocks of 64 queries against every key any query of the block sees
//                       (masked entries are computed, then zeroed): per layer and head
//                       4·H·entries forward (+4·H·entries again with remat) and 10·H·entries
//                       backward (QKᵀ recomputed, dO·Vᵀ, dS·K, dSᵀ·Q, Pᵀ·dO)
// Norms, RoPE, GeGLU, softmax and the loss's row work are O(T·D) and not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dist/communicator.h"
#include "model/config.h"
#include "model/train/lora.h"
#include "util/result.h"

namespace gk {

struct TrainBenchOptions {
  std::string model_dir;
  int seq_len = 512;
  int rank = 16;
  double alpha = 32;
  int steps = 3;           // timed steps, after one warm-up step
  bool remat = false;
  bool compare_remat = false;  // run with remat, then without, and report the saving
  bool full = false;       // full fine-tuning: every weight's gradient (no adapter)
  std::string precision = "bf16";  // the recipe's train.precision: "bf16" | "f32"
  int threads = 0;         // 0: all cores
  // Projections carrying a LoRA: q, k, v, o, gate, up, down (or their module names, q_proj...).
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  uint64_t seed = 1;
  int peak_repeats = 5;    // runs of each FMA-peak probe (median)
  // Data parallel (`mpirun -np N gemmakit bench train`): every rank trains its own row and the
  // gradients are all-reduced each step, as the trainer does. Rank 0 first runs alone (the
  // others wait without spinning) for the one-rank baseline of the scaling figure.
  dist::Communicator* comm = nullptr;
  // Tensor parallel (`mpirun -np N gemmakit bench train --tp N`): the N ranks train one row
  // together, each on its share of the model and adapter (model/tensor_parallel.h); the same
  // rank-0-alone baseline.
  int tp = 1;
};

// FLOPs of one training step over one row of T tokens (see the header comment).
struct TrainFlops {
  int64_t tokens = 0, loss_rows = 0;
  double frozen_layer_params = 0;  // Σ P over the decoder layers' matrices
  double head_params = 0;          // V·D (the tied embedding as the output head)
  double ple_projection_params = 0;  // D·L·P: E2B/E4B's per-layer input projection, once per token
  double lora_params = 0;          // Σ Pl
  double attention_nh_pairs = 0;    // Σ over layers of N·H·(visible pairs): useful = 14 × this
  double attention_nh_entries = 0;  // Σ over layers of N·H·(block entries): executed = 14 (18 remat) × this
  // useful
  double frozen_useful = 0, lora_useful = 0, attention_useful = 0, useful = 0;
  // executed
  double layers_executed = 0, head_executed = 0, lora_executed = 0, attention_executed = 0, executed = 0;
};

// adapter: null for full fine-tuning (full = true: every matrix also gets its weight gradient).
TrainFlops CountTrainFlops(const ModelConfig& c, const LoraAdapter* adapter, int64_t T, bool remat, bool full = false);
// Per head, one row of T tokens: the (query, key) pairs a layer's attention needs (full: causal;
// sliding: the last `window` positions), and the score entries the 64-query blocks compute.
int64_t VisiblePairs(int64_t T, bool full, int64_t window);
int64_t AttentionBlockEntries(int64_t T, bool full, int64_t window);
// "q" -> "q_proj", "gate" -> "gate_proj"; a full module name is kept. Errors: an unknown name.
Result<std::vector<std::string>> LoraTargetNames(const std::vector<std::string>& targets);

struct TrainBenchRun {
  bool remat = false;
  std::vector<double> step_seconds;  // the timed steps
  double mean_step_s = 0, median_step_s = 0, min_step_s = 0;
  double tokens_per_s = 0;           // T ÷ mean step time (as the PyTorch baseline reports)
  double loss = 0;                   // mean loss per target of the last step
  int64_t activation_bytes = 0;      // kept for the backward pass (TrainingModel::activation_bytes)
  uint64_t peak_rss_bytes = 0;       // the process's peak so far (remat runs first under compare)
  double load_seconds = 0;
  TrainFlops flops;
  double useful_gflops = 0, executed_gflops = 0;  // per second, at the mean step time
  double useful_ratio = 0, executed_ratio = 0;    // ÷ the fp32 FMA peak
  double useful_ratio_bf16 = 0;                   // ÷ the bf16 dot-product peak (0 without one)
  // Means over the timed steps of where the step went (TrainingModel::PassSeconds).
  double forward_s = 0, loss_head_s = 0, backward_s = 0;
};

struct TrainBenchResult {
  std::string model_dir, arch, weight_dtype, cpu, isa;
  int threads = 0, seq_len = 0, rank = 0, steps = 0;
  double alpha = 0;
  std::vector<std::string> targets;
  int lora_modules = 0;
  bool full = false;
  int64_t trainable_params = 0;
  // The fp32 FMA peak probe (MeasureFp32Peak, a median of peak_repeats) runs before the first
  // run, before every step and after the last run; the ratios use the highest probe (the
  // hardware's limit: on a shared machine a neighbour's load can only lower a probe, and a
  // lowered one would flatter the ratio).
  double fp32_peak_gflops = 0;
  std::vector<double> fp32_peak_probes;
  // The same for the bf16 dot-product peak (MeasureBf16Peak, vdpbf16ps), before and after the
  // runs; 0 on CPUs without AVX-512 BF16.
  double bf16_peak_gflops = 0;
  std::vector<double> bf16_peak_probes;
  // What the products computed: "bf16" or "f32" (full fine-tuning and f32 weights: f32), and for
  // bf16 the route: "oneDNN" (AVX-512 BF16) or "emulated" (rounded activations, f32 sgemm).
  std::string precision, bf16_route;
  std::vector<TrainBenchRun> runs;  // one, or (remat, no remat) with compare_remat
  // Data parallel: the figures above are all ranks' (tokens and FLOPs of N rows per step, the
  // peak summed over the ranks' probes, taken at the same time).
  int ranks = 1;
  std::string comm_backend;
  double one_rank_tokens_per_s = 0;   // rank 0 alone, same threads, same row
  int64_t allreduce_bytes_per_step = 0;  // gradient bytes each rank all-reduces per step
  int tp = 1;                         // tensor parallel: the ranks above train one row together
  int64_t tp_bytes_per_step = 0;      // bytes each rank hands to collectives per step (tensor parallel)
};

Result<TrainBenchResult> RunTrainBench(const TrainBenchOptions& options);
std::string FormatTrainBench(const TrainBenchResult& r);
nlohmann::json TrainBenchToJson(const TrainBenchResult& r);

}  // namespace gk
