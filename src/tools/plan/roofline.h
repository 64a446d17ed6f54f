// Roofline projections of training step time, prefill (TTFT) and decode (TPOT) for a model on
// a catalog machine. Lower bounds from peak FLOP rate, HBM bandwidth and interconnect
// bandwidth; nothing here is fitted to any measurement (docs/COST.md, "Projection").
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "tools/cost/hardware_catalog.h"
#include "tools/plan/sharding.h"

namespace gk::plan {

// Matmul parameters per token: every projection of every layer a token goes through (of an MoE
// block the router and top_k experts; no k/v on KV-shared layers; PLE's projections), plus the
// tied lm_head (V × D, a real matmul); the embedding lookups and norms do no matmul.
double MatmulParams(const ModelConfig& c);
// The same with every expert: the matmul weights a pass over many tokens reads.
double StoredMatmulParams(const ModelConfig& c);
// Attention score + value FLOPs of one forward token, averaged over a causal sequence of
// `seq` tokens (sliding layers see at most the window): Σ_l 4 · N · H_l · mean keys_l.
double AttentionFlopsPerToken(const ModelConfig& c, int64_t seq);
// LoRA parameters of rank r on the reference case's TPU target set (sharding.h).
double LoraParams(const ModelConfig& c, int rank);

struct TrainProjection {
  double flops_per_token = 0;
  double tokens_per_step = 0;      // micro-batch × seq × fsdp
  double t_compute = 0, t_memory = 0, t_comm = 0, step_s = 0;
  double tokens_per_s = 0;
  std::string formula;             // the FLOP terms, for the printout
};
// full FT: 6 N + 3 A (+ 2 N + A recompute with remat); LoRA on a frozen base: forward 2 N,
// backward activation gradient 2 N, recompute 2 N with remat, LoRA 6 n_lora (+ 2 n_lora),
// attention A forward, 2 A backward (+ A). The lm_head is never recomputed.
// step = max(compute, HBM weight reads, tp all-reduces + fsdp all-gathers): each resource
// at its peak with perfect overlap, so a lower bound on the time.
TrainProjection ProjectTraining(const ModelConfig& c, const cost::Machine& hw, const Mesh& m, int64_t seq_len,
                                int micro_batch, int lora_rank, bool remat);

struct ServeProjection {
  double ttft_s = 0, ttft_compute_s = 0, ttft_memory_s = 0, ttft_comm_s = 0;
  double tpot_s = 0, tpot_weights_s = 0, tpot_kv_s = 0, tpot_comm_s = 0, tpot_compute_s = 0;
};
// Prefill of `input_len` tokens (one request): max(FLOPs / tp peak, weight bytes / tp
// bandwidth, 2 all-reduces per layer). Decode step of `batch` sequences at `context` tokens:
// max((weight bytes + batch × KV bytes) per device / bandwidth, FLOPs / tp peak, 2 all-reduces
// per layer (latency + ring transfer of batch × D bf16)): perfect overlap, a lower bound.
ServeProjection ProjectServing(const ModelConfig& c, const cost::Machine& hw, int tp, int64_t input_len,
                               int64_t context, int batch, int kv_elem_bytes);

}  // namespace gk::plan
