#include "tools/plan/roofline.h"

#include <algorithm>
#include <cmath>

#include "tools/plan/memory_plan.h"
#include "util/result.h"

namespace gk::plan {
namespace {

// Ring all-reduce of `bytes` over n devices: 2 (n−1)/n of the data leaves each device; the
// catalog's interconnect figure counts both directions, so one direction is half of it.
double AllReduceSeconds(double bytes, int n, const cost::Chip& chip) {
  if (n <= 1 || chip.interconnect_gb_s <= 0) return 0;
  return chip.collective_latency_us * 1e-6 + 2.0 * (n - 1) / n * bytes / (chip.InterconnectBytesPerS() / 2);
}
double AllGatherSeconds(double bytes, int n, const cost::Chip& chip) {
  if (n <= 1 || chip.interconnect_gb_s <= 0) return 0;
  return double(n - 1) / n * bytes / (chip.InterconnectBytesPerS() / 2);
}

// Matmul parameters one token of layer l goes through: q, o, k (and v) unless KV-shared, the
// dense MLP, PLE's gate and projection, and of the MoE block the router and top_k experts.
double LayerMatmulParams(const ModelConfig& c, int l) {
  const double D = c.hidden_size, H = c.HeadDim(l), K = c.KvHeads(l);
  double n = 2.0 * c.num_heads * H * D + 3.0 * D * c.MlpWidth(l);
  if (!c.IsKvShared(l)) n += K * H * D * (c.KEqV(l) ? 1 : 2);
  n += 2.0 * D * c.hidden_size_per_layer_input;
  if (c.enable_moe_block) n += double(c.num_experts) * D + ExpertParamsPerLayer(c) * c.top_k_experts / c.num_experts;
  return n;
}

// The per-layer inputs' projection (D → L·P), once per token; the PLE table is a lookup.
double PleProjectionParams(const ModelConfig& c) {
  return double(c.hidden_size) * c.num_layers * c.hidden_size_per_layer_input;
}

// One new token attending over `context` keys (sliding layers: at most the window).
double DecodeAttentionFlops(const ModelConfig& c, int64_t context) {
  double f = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    f += 4.0 * c.num_heads * c.HeadDim(l) * double(c.IsFull(l) ? context : std::min<int64_t>(context, c.sliding_window));
  }
  return f;
}

}  // namespace

double MatmulParams(const ModelConfig& c) {
  double n = double(c.vocab_size) * c.hidden_size + PleProjectionParams(c);
  for (int l = 0; l < c.num_layers; ++l) n += LayerMatmulParams(c, l);
  return n;
}

double StoredMatmulParams(const ModelConfig& c) {
  const double idle_experts = ExpertParamsPerLayer(c) * (1.0 - double(c.top_k_experts) / std::max(1, c.num_experts));
  return MatmulParams(c) + c.num_layers * (c.enable_moe_block ? idle_experts : 0.0);
}

double AttentionFlopsPerToken(const ModelConfig& c, int64_t seq) {
  double f = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    // Mean over t = 1..seq of min(t, window) keys.
    const int64_t w = c.IsFull(l) ? seq : std::min<int64_t>(seq, c.sliding_window);
    const double sum = double(w) * (w + 1) / 2 + double(seq - w) * w;
    f += 4.0 * c.num_heads * c.HeadDim(l) * (sum / double(seq));
  }
  return f;
}

double LoraParams(const ModelConfig& c, int rank) { return double(TotalElements(LoraTensors(c, rank))); }

TrainProjection ProjectTraining(const ModelConfig& c, const cost::Machine& hw, const Mesh& m, int64_t seq_len,
                                int micro_batch, int lora_rank, bool remat) {
  TrainProjection p;
  const double N = MatmulParams(c), head = double(c.vocab_size) * c.hidden_size, Nl = N - head;
  const double A = AttentionFlopsPerToken(c, seq_len);
  if (lora_rank > 0) {
    const double nl = LoraParams(c, lora_rank);
    p.flops_per_token = 2 * N + 2 * N + (remat ? 2 * Nl : 0) + 6 * nl + (remat ? 2 * nl : 0) + 3 * A + (remat ? A : 0);
    p.formula = StrCat("2N fwd + 2N bwd(act)", remat ? " + 2N_layers recompute" : "", " + ", remat ? 8 : 6,
                       "·n_lora + ", remat ? 4 : 3, "·attn");
  } else {
    p.flops_per_token = 6 * N + 3 * A + (remat ? 2 * Nl + A : 0);
    p.formula = StrCat("6N", remat ? " + 2N_layers recompute" : "", " + ", remat ? 4 : 3, "·attn");
  }
  p.tokens_per_step = double(seq_len) * micro_batch * m.fsdp;
  const int chips = m.Size();
  p.t_compute = p.flops_per_token * p.tokens_per_step / (chips * hw.chip.Flops(false));
  // Each device reads its tp shard of every (all-gathered) weight once per pass (a step's
  // thousands of tokens reach every expert).
  const double weight_bytes = 2.0 * StoredMatmulParams(c);
  const double passes = remat ? 3 : 2;
  p.t_memory = passes * weight_bytes / m.tp / hw.chip.BandwidthBytesPerS();
  // tp: 2 all-reduces of the (T, D) bf16 activations per layer and pass (o and down outputs).
  const double act = 2.0 * double(seq_len) * micro_batch * c.hidden_size;
  p.t_comm = passes * 2 * c.num_layers * AllReduceSeconds(act, m.tp, hw.chip);
  // fsdp: weights all-gathered per pass; gradients reduce-scattered once (trainable only).
  const double trainable = lora_rank > 0 ? LoraParams(c, lora_rank) : N;
  p.t_comm += passes * AllGatherSeconds(weight_bytes / m.tp, m.fsdp, hw.chip) +
              AllGatherSeconds(2.0 * trainable / m.tp, m.fsdp, hw.chip);
  p.step_s = std::max({p.t_compute, p.t_memory, p.t_comm});
  p.tokens_per_s = p.tokens_per_step / p.step_s;
  return p;
}

ServeProjection ProjectServing(const ModelConfig& c, const cost::Machine& hw, int tp, int64_t input_len,
                               int64_t context, int batch, int kv_elem_bytes) {
  ServeProjection s;
  // The PLE table is looked up, a row per token, never streamed whole.
  const double ple_table = 2.0 * c.vocab_size_per_layer_input * c.num_layers * c.hidden_size_per_layer_input / tp;
  const double weights = ServingWeightBytesPerDevice(c, tp) - ple_table, bw = hw.chip.BandwidthBytesPerS();
  const double Nl = MatmulParams(c) - double(c.vocab_size) * c.hidden_size;
  // Prefill: every layer matmul for every prompt token, the lm_head for the last one only.
  const double prefill = 2 * Nl * input_len + AttentionFlopsPerToken(c, input_len) * input_len +
                         2.0 * c.vocab_size * c.hidden_size;
  s.ttft_compute_s = prefill / (tp * hw.chip.Flops(false));
  s.ttft_memory_s = weights / bw;
  const double prefill_comm = 2 * c.num_layers * AllReduceSeconds(2.0 * input_len * c.hidden_size, tp, hw.chip);
  s.ttft_comm_s = prefill_comm;
  s.ttft_s = std::max({s.ttft_compute_s, s.ttft_memory_s, prefill_comm});
  // A decode step reads the experts its batch's tokens were routed to: E·(1 − (1 − k/E)^batch)
  // of them on average under uniform routing.
  double step_weights = weights;
  if (c.enable_moe_block) {
    const double E = c.num_experts, hit = E * (1.0 - std::pow(1.0 - c.top_k_experts / E, double(batch)));
    step_weights -= 2.0 * c.num_layers * ExpertParamsPerLayer(c) * (1.0 - hit / E) / tp;
  }
  s.tpot_weights_s = step_weights / bw;
  s.tpot_kv_s = double(batch) * KvBytesPerSequence(c, context, tp, kv_elem_bytes) / bw;
  s.tpot_comm_s = 2 * c.num_layers * AllReduceSeconds(2.0 * batch * c.hidden_size, tp, hw.chip);
  // A large batch can turn decode compute-bound: every layer matmul and the lm_head per token.
  const double decode_flops = double(batch) * (2 * MatmulParams(c) + DecodeAttentionFlops(c, context));
  s.tpot_compute_s = decode_flops / (tp * hw.chip.Flops(false));
  s.tpot_s = std::max({s.tpot_weights_s + s.tpot_kv_s, s.tpot_compute_s, s.tpot_comm_s});
  return s;
}

}  // namespace gk::plan
