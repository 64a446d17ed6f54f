#include "tools/plan/memory_plan.h"

#include <algorithm>

#include "util/result.h"

namespace gk::plan {
TrainMemory TrainingMemory(const ModelConfig& c, const std::vector<TensorGroup>& base, const Mesh& m,
                           const TrainPlanOptions& o) {
  TrainMemory r;
  r.params = TotalElements(base);
  const double weights = 2.0 * double(ElementsPerDevice(base, m));
  r.lines.push_back({"base weights (bf16)", weights, "Σ tensor / mesh axes of its spec × 2 B"});
  std::vector<TensorGroup> trainable;
  if (o.lora_rank > 0) {
    trainable = LoraTensors(c, o.lora_rank);
    FilterInheritedSpecs(trainable, m);
  } else {
    trainable = base;
    FilterInheritedSpecs(trainable, m);
  }
  r.trainable = TotalElements(trainable);
  const double tr_dev = double(ElementsPerDevice(trainable, m));
  if (o.lora_rank > 0) {
    r.lines.push_back({"LoRA factors (bf16, Qwix: the base dtype)", 2 * tr_dev, "inherited spec, filtered"});
    r.lines.push_back({"gradients (bf16)", 2 * tr_dev, "same specs as the trainable params"});
  } else {
    // Mixed precision, as gemmakit's trainer and PyTorch's AMP recipes train: the bf16 weights
    // the passes read, f32 masters that AdamW updates, f32 gradients.
    r.lines.push_back({"master weights (f32)", 4 * tr_dev, "AdamW updates these, rounded into the bf16 weights"});
    r.lines.push_back({"gradients (f32)", 4 * tr_dev, "same specs as the weights"});
  }
  r.lines.push_back({"AdamW m + v (f32)", 8 * tr_dev, "2 × 4 B per trainable param, same filter"});
  // Activations of one data-parallel (fsdp) rank's micro-batch; every (T, ·) tensor split over
  // tp (Tunix act_btd / act_btf / act_btnh put tp on the last axis).
  const int64_t T = o.seq_len * o.micro_batch;
  const int shard = m.tp;
  ActivationOptions a{T, o.lora_rank, false, o.activation_elem_bytes};
  r.activations_no_remat = double(ActivationBytes(c, a)) / shard;
  a.remat = true;
  r.activations_remat = double(ActivationBytes(c, a)) / shard;
  const char* dt = o.activation_elem_bytes == 4 ? "f32" : "bf16";
  r.lines.push_back({StrCat("activations (", dt, o.remat ? ", remat per layer)" : ", no remat)"),
                     o.remat ? r.activations_remat : r.activations_no_remat,
                     StrCat("T = ", o.seq_len, " × ", o.micro_batch, " tokens; / ", shard, " devices")});
  if (o.activation_elem_bytes == 4) {  // gemmakit's CPU trainer: the vocabulary a chunk at a time
    r.lines.push_back({"loss head (f32, chunked)", LossHeadBytes(c, T), "one vocabulary chunk at a time"});
  } else {  // the loss head's logits in f32, vocab over tp (emb_vd puts tp on the vocab axis)
    r.lines.push_back({"logits (f32, T × vocab)", 4.0 * double(T) * c.vocab_size / shard, "unless the loss is chunked"});
  }
  for (const MemoryLine& l : r.lines) r.total += l.bytes;
  return r;
}

int KvHeadsPerDevice(int kv_heads, int tp) { return kv_heads >= tp ? kv_heads / tp : 1; }

int64_t KvBytesPerTokenLayer(const ModelConfig& c, int l, int tp, int elem_bytes) {
  return 2LL * KvHeadsPerDevice(c.KvHeads(l), tp) * c.HeadDim(l) * elem_bytes;
}

int64_t KvBytesPerSequence(const ModelConfig& c, int64_t context, int tp, int elem_bytes) {
  int64_t n = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.IsKvShared(l)) continue;
    const int64_t positions = c.IsFull(l) ? context : std::min<int64_t>(context, c.sliding_window);
    n += positions * KvBytesPerTokenLayer(c, l, tp, elem_bytes);
  }
  return n;
}

Status CheckServeTp(const ModelConfig& c, int tp) {
  if (c.num_heads % tp != 0) {
    return Status::Error(StrCat("tp=", tp, " does not divide num_attention_heads=", c.num_heads,
                                " (vLLM splits the query heads over tp)"));
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const int k = c.KvHeads(l);
    if (k % tp != 0 && tp % k != 0) {
      return Status::Error(StrCat("tp=", tp, " neither divides nor is a multiple of ",
                                  c.KEqV(l) ? "num_global_key_value_heads=" : "num_key_value_heads=", k,
                                  " (vLLM splits kv heads over tp or replicates them)"));
    }
  }
  return Status::Ok();
}

double ServingWeightBytesPerDevice(const ModelConfig& c, int tp) {
  const double D = c.hidden_size, P = c.hidden_size_per_layer_input, L = c.num_layers;
  double n = double(c.vocab_size) * D / tp + D;  // vocab-parallel embedding, final norm
  // PLE: the vocab-parallel per-layer table and the model projection split over tp.
  if (P > 0) n += (double(c.vocab_size_per_layer_input) * L * P + D * L * P) / tp + P;
  for (int l = 0; l < c.num_layers; ++l) {
    const double H = c.HeadDim(l), F = c.MlpWidth(l);
    n += 2.0 * c.num_heads * H * D / tp;  // q, o
    if (!c.IsKvShared(l)) {               // KV-shared layers read another layer's cache: no k/v weights
      n += KvHeadsPerDevice(c.KvHeads(l), tp) * H * D * (c.KEqV(l) ? 1 : 2);  // k (and v), replicated heads whole
    }
    n += 3.0 * D * F / tp;
    n += 4 * D + 2 * H + (c.arch == Arch::kGemma4 ? 1 : 0);
    if (P > 0) n += 2.0 * D * P / tp + D;
    if (c.enable_moe_block) n += ExpertParamsPerLayer(c) / tp + double(c.num_experts) * D + 4 * D + c.num_experts;
  }
  return 2.0 * n;
}

double ExpertParamsPerLayer(const ModelConfig& c) {
  return c.enable_moe_block ? 3.0 * c.num_experts * c.hidden_size * c.moe_intermediate_size : 0;
}

ServeMemory ServingMemory(const ModelConfig& c, int tp, double device_bytes, int64_t max_model_len) {
  ServeMemory s;
  s.weights = ServingWeightBytesPerDevice(c, tp);
  // The profiling pass of one max_model_len prefill (no chunked prefill): the largest layer's
  // working tensors in bf16, split over tp, plus the residual stream.
  int64_t H = 0, F = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    H = std::max<int64_t>(H, c.HeadDim(l));
    F = std::max<int64_t>(F, c.MlpWidth(l));
  }
  const double T = double(max_model_len);
  s.activation_reserve = 2.0 * T * (4.0 * c.hidden_size + (3.0 * F + 3.0 * c.num_heads * H) / tp);
  s.budget = device_bytes * s.utilization - s.weights - s.activation_reserve;
  s.fits = s.budget > 0;
  return s;
}

}  // namespace gk::plan
