#include "model/train/training_memory.h"

#include <algorithm>

#include "kernels/attention_train_workspace.h"
#include "kernels/loss_head_chunk.h"
#include "util/result.h"

namespace gk {
namespace {

// Elements of TrainingModel::LayerActs sized for heads H, kv heads K, MLP width F.
int64_t LayerActElements(const ModelConfig& c, int64_t H, int64_t K, int64_t F, int lora_targets, int rank, int64_t T) {
  const int64_t D = c.hidden_size, NH = int64_t(c.num_heads) * H, KH = K * H;
  int64_t n = T * D;           // xn
  n += T * NH + 2 * T * KH;    // q_raw, k_raw, v_raw
  n += T * NH + 2 * T * KH;    // q, k, v
  n += T * NH;                 // att
  n += int64_t(c.num_heads) * T;  // lse
  n += 3 * T * D;              // o, x1, xn2
  n += 3 * T * F;              // g, up, act
  n += T * D;                  // m
  n += int64_t(lora_targets) * T * rank;  // u
  if (c.enable_moe_block) {
    const int64_t E = c.num_experts, k = c.top_k_experts, Fe = c.moe_intermediate_size;
    n += 3 * T * D;                     // mm, xe, y
    n += T * E + 3 * T * k;             // probs, top, top_w, order
    n += T * k * (2 * Fe + Fe + D);     // eg, ea, eo
  }
  if (c.hidden_size_per_layer_input > 0) {
    n += 2 * T * D + 2 * T * c.hidden_size_per_layer_input;  // x2, ple_o, ple_g, ple_a
  }
  return n;
}

}  // namespace

int LoraProjections(const ModelConfig& c, int l) {
  if (c.IsKvShared(l)) return 5;  // q, o, gate, up, down
  return c.KEqV(l) ? 6 : 7;
}

int64_t TrainingActivationBytes(const ModelConfig& c, const ActivationOptions& o) {
  const int64_t T = o.tokens, D = c.hidden_size;
  int64_t n = int64_t(c.num_layers + 1) * T * D;  // layer_inputs
  if (o.remat) {
    // One shared buffer sized for the largest layer, each dimension maximised separately, with
    // the A-products of every projection kind some layer adapts.
    int64_t H = 0, K = 0, F = 0;
    bool has_v = false, has_k = false;
    for (int l = 0; l < c.num_layers; ++l) {
      H = std::max<int64_t>(H, c.HeadDim(l));
      K = std::max<int64_t>(K, c.KvHeads(l));
      F = std::max<int64_t>(F, c.MlpWidth(l));
      has_k |= !c.IsKvShared(l);
      has_v |= !c.IsKvShared(l) && !c.KEqV(l);
    }
    const int targets = 5 + int(has_k) + int(has_v);
    n += LayerActElements(c, H, K, F, o.lora_rank > 0 ? targets : 0, o.lora_rank, T);
  } else {
    for (int l = 0; l < c.num_layers; ++l) {
      n += LayerActElements(c, c.HeadDim(l), c.KvHeads(l), c.MlpWidth(l),
                            o.lora_rank > 0 ? LoraProjections(c, l) : 0, o.lora_rank, T);
    }
  }
  return n * o.elem_bytes;
}

int64_t FullFineTuneParameters(const ModelConfig& c) {
  int64_t n = c.ParameterCount();
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.arch == Arch::kGemma4) n -= 1;  // layer_scalar
    if (c.IsKvShared(l)) {
      // ParameterCount counts k (and v) and k_norm of every layer; shared layers read none.
      n -= int64_t(c.KvHeads(l)) * c.HeadDim(l) * c.hidden_size * (c.KEqV(l) ? 1 : 2) + c.HeadDim(l);
    }
  }
  return n;
}

int64_t LoraParameters(const ModelConfig& c, int rank) {
  const int64_t D = c.hidden_size;
  int64_t n = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const int64_t NH = int64_t(c.num_heads) * c.HeadDim(l), KH = int64_t(c.KvHeads(l)) * c.HeadDim(l), F = c.MlpWidth(l);
    int64_t in_out = (D + NH) * 2 + (D + F) * 3;  // q, o; gate, up, down
    if (!c.IsKvShared(l)) in_out += (D + KH) * (c.KEqV(l) ? 1 : 2);  // k, and v unless K=V
    n += in_out * rank;
  }
  return n;
}

GpuLoraMemory EstimateGpuLoraTraining(const ModelConfig& c, const GpuLoraRun& run) {
  const int64_t tokens = run.tokens;
  const int rank = run.rank;
  const bool remat = run.remat;
  GpuLoraMemory m;
  m.trainable = run.trainable >= 0 ? run.trainable : LoraParameters(c, rank);
  const double p = double(m.trainable), T = double(tokens);
  m.items.push_back({run.weight_bytes == 4 ? "base weights (f32)" : "base weights (bf16)",
                     double(run.weight_bytes) * double(c.ParameterCount()), "every tensor of the checkpoint"});
  m.items.push_back({"LoRA factors (f32)", 4 * p,
                     StrCat("rank ", rank, run.trainable >= 0 ? ", the adapter's projections" : ", every projection")});
  m.items.push_back({"LoRA gradients (f32)", 4 * p, "accumulated over the micro-batches (AdamW's moments: host)"});
  m.items.push_back({StrCat("activations (f32", remat ? ", remat per layer)" : ", no remat)"),
                     double(TrainingActivationBytes(c, {tokens, rank, remat, 4})), StrCat("T = ", tokens, " tokens")});
  {  // the backward pass's buffers, sized for the widest layer (CudaTrainingModel's Allocate)
    int64_t H = 0, K = 0, F = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      H = std::max<int64_t>(H, c.HeadDim(l));
      K = std::max<int64_t>(K, c.KvHeads(l));
      F = std::max<int64_t>(F, c.MlpWidth(l));
    }
    const double D = double(c.hidden_size), NH = double(c.num_heads) * double(H), KH = double(K) * double(H);
    m.items.push_back({"gradients of one layer (f32)", 4 * T * (6 * D + 2 * NH + 2 * KH + 3 * double(F) + rank),
                       "dx, dq, dk, dv, the MLP's and the loss rows'"});
  }
  if (c.hidden_size_per_layer_input > 0 || c.num_kv_shared_layers > 0) {
    // E2B/E4B: every layer's per-layer inputs and their token rows (T × L × P each), one layer's
    // slice and the gradients of its gate (P each); each KV source layer's K and V kept for the
    // layers sharing them, and the gradients those send back.
    const double P = double(c.hidden_size_per_layer_input);
    double n = P > 0 ? 2 * double(c.num_layers) * P + 4 * P : 0;
    for (int l = 0; l < c.num_layers; ++l) {
      if (c.IsKvSource(l)) n += 4.0 * double(c.KvHeads(l)) * double(c.HeadDim(l));
    }
    m.items.push_back({"per-layer inputs, shared K/V (f32)", 4 * T * n, "E2B/E4B: PLE and KV sharing"});
  }
  if (c.enable_moe_block) {
    // The MoE block's backward pass: per slot (T·k) the experts' output, input, gate|up and
    // activation gradients and the routing weight's; per token the dense MLP's and the experts'
    // sums', the router input's and the logits' gradients.
    const double D = double(c.hidden_size), Fe = double(c.moe_intermediate_size), k = double(c.top_k_experts);
    m.items.push_back({"MoE gradients (f32)", 4 * T * (k * (2 * D + 3 * Fe + 1) + 4 * D + double(c.num_experts)),
                       "26B-A4B: the experts' rows of one layer"});
  }
  uint64_t attention = 0;
  for (int l = 0; l < c.num_layers; ++l) {  // the largest layer's: one workspace for all
    attention = std::max(attention, TrainAttentionTileBytes(c.num_heads, c.KvHeads(l), c.HeadDim(l), tokens, 4) +
                                        TrainAttentionBackwardExtraBytes(c.num_heads, c.KvHeads(l), c.HeadDim(l), tokens));
  }
  m.items.push_back({"attention workspace", double(attention), "one tile of 256 queries' scores, dK and dV"});
  const double head_rows = double(LossHeadChunkRows(tokens, c.vocab_size));
  m.items.push_back({"loss head (f32)", 4 * head_rows * T + 5 * 4 * T, "one vocabulary chunk of logits"});
  int64_t widest = c.hidden_size;  // the widest product input: the MLP's, or the attention's output
  for (int l = 0; l < c.num_layers; ++l) {
    widest = std::max<int64_t>({widest, c.MlpWidth(l), int64_t(c.num_heads) * c.HeadDim(l)});
  }
  // GemmRunner's staging: the widest input as bf16, once (bf16 precision) or as three exact terms
  // (f32); MoE's router takes its input (T × D) as three terms in either precision.
  const bool f32 = run.precision == TrainPrecision::kF32;
  double staging = 2 * T * double(widest) * (f32 ? 3 : 1);
  if (!f32 && c.enable_moe_block) staging += 2 * 2 * T * double(c.hidden_size);
  m.items.push_back({"cuBLASLt workspace and bf16 staging", double(32 << 20) + staging,
                     f32 ? "inputs as three exact bf16 terms (f32 precision)" : "inputs as bf16"});
  for (const MemoryItem& i : m.items) m.total += i.bytes;
  return m;
}

double LossHeadBytes(const ModelConfig& c, int64_t tokens) {
  return 2.0 * (16 << 20) + 2.0 * 4 * double(tokens) * c.hidden_size;
}

FullFineTuneMemory EstimateFullFineTune(const ModelConfig& c, int weight_bytes, int64_t tokens, bool remat) {
  FullFineTuneMemory m;
  m.params = FullFineTuneParameters(c);
  const double p = double(m.params);
  m.items.push_back({StrCat("weights (", weight_bytes == 2 ? "bf16" : "f32", ", what the passes read)"),
                     p * weight_bytes, "every trained tensor in the checkpoint's dtype"});
  m.items.push_back({"master weights (f32)", 4 * p, "updated by AdamW, rounded into the weights"});
  m.items.push_back({"gradients (f32)", 4 * p, "accumulated over the micro-batches"});
  m.items.push_back({"AdamW m + v (f32)", 8 * p, "2 × 4 B per parameter"});
  const double act = double(TrainingActivationBytes(c, {tokens, 0, remat, 4}));
  m.items.push_back({StrCat("activations (f32", remat ? ", remat per layer)" : ", no remat)"), act,
                     StrCat("T = ", tokens, " tokens of one micro-batch")});
  m.items.push_back({"loss head (f32)", LossHeadBytes(c, tokens), "one vocabulary chunk at a time"});
  for (const MemoryItem& i : m.items) m.total += i.bytes;
  return m;
}

}  // namespace gk
