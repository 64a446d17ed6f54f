// Memory per device of a training or serving plan: weights, LoRA, gradients, optimizer state,
// activations, KV cache (../shared/spec/gemma4.md §1.5, §1.7 for the shapes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/train/training_memory.h"
#include "tools/plan/sharding.h"

namespace gk::plan {

// The trainer's activation estimate (model/train/training_memory.h), under the plan's names.
using ::gk::ActivationOptions;
inline int64_t ActivationBytes(const ModelConfig& c, const ActivationOptions& o) { return TrainingActivationBytes(c, o); }

struct TrainPlanOptions {
  int64_t seq_len = 3072;
  int micro_batch = 1;   // sequences per data-parallel (fsdp) rank
  int lora_rank = 64;    // 0 = full fine-tuning
  bool remat = false;
  int activation_elem_bytes = 2;  // bf16 on accelerators; 4 = our f32 CPU trainer
};

struct MemoryLine {
  std::string what;
  double bytes = 0;  // per device
  std::string how;
};

struct TrainMemory {
  int64_t params = 0, trainable = 0;
  std::vector<MemoryLine> lines;
  double total = 0;
  double activations_no_remat = 0, activations_remat = 0;  // per device, both shown
};
// base must have passed CheckBaseSharding (effective specs set).
TrainMemory TrainingMemory(const ModelConfig& c, const std::vector<TensorGroup>& base, const Mesh& m,
                           const TrainPlanOptions& o);

// KV cache, vLLM-style: K and V of every layer (K=V full layers too: their V is the raw K
// projection before k_norm and RoPE, a different tensor), sliding layers hold at most
// `sliding_window` positions; kv heads split over tp, replicated when fewer than tp.
int KvHeadsPerDevice(int kv_heads, int tp);
// Bytes per token of one layer on one device.
int64_t KvBytesPerTokenLayer(const ModelConfig& c, int layer, int tp, int elem_bytes);
// Bytes of one sequence of `context` tokens on one device (sliding layers capped at the window).
int64_t KvBytesPerSequence(const ModelConfig& c, int64_t context, int tp, int elem_bytes);

struct ServeMemory {
  double weights = 0;            // per device, Megatron-style tp (vLLM)
  double activation_reserve = 0; // one prefill of max_model_len tokens
  double budget = 0;             // memory × utilization − weights − reserve
  double utilization = 0.9;
  bool fits = false;
};
// vLLM refuses tp that does not divide num_attention_heads, or kv heads it can neither split
// nor replicate; the error names the field.
Status CheckServeTp(const ModelConfig& c, int tp);
ServeMemory ServingMemory(const ModelConfig& c, int tp, double device_bytes, int64_t max_model_len);
// Weight bytes of one device when serving with tp (bf16): every weight split over tp but the
// norms, the MoE router and kv heads fewer than tp; KV-shared layers hold no k/v.
double ServingWeightBytesPerDevice(const ModelConfig& c, int tp);
// The expert matrices of one MoE layer (gate, up, down of every expert), 0 without MoE.
double ExpertParamsPerLayer(const ModelConfig& c);

}  // namespace gk::plan
