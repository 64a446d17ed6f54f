// The decoder's weights, read from a Hugging Face checkpoint into memory we own.
// Matrices keep their checkpoint dtype (bf16 or f32; f16 is widened to f32); vectors (norms,
// scales) are converted to f32 once at load, with Gemma 3's (1 + w) folded in so the forward
// pass has a single x·w RMSNorm for both architectures.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensor_parallel.h"
#include "tensor/matrix.h"
#include "util/result.h"

namespace gk {

struct LayerWeights {
  std::vector<float> input_norm;      // (D)
  std::vector<float> post_attn_norm;  // (D)
  std::vector<float> pre_ffw_norm;    // (D)
  std::vector<float> post_ffw_norm;   // (D)
  std::vector<float> q_norm;          // (H)
  std::vector<float> k_norm;          // (H)  empty on KV-shared layers
  MatrixView q;                       // (N·H, D)
  MatrixView k;                       // (K·H, D)  empty on KV-shared layers
  MatrixView v;                       // (K·H, D)  empty on k_eq_v and KV-shared layers
  MatrixView o;                       // (D, N·H)
  MatrixView gate, up;                // (F, D)
  MatrixView down;                    // (D, F)
  float layer_scalar = 1.f;
  // PLE (E2B/E4B).
  MatrixView ple_gate;                // (P, D)
  MatrixView ple_proj;                // (D, P)
  std::vector<float> post_ple_norm;   // (D)
  // MoE (26B-A4B).
  MatrixView router;                  // (E, D)
  std::vector<float> router_scale;    // (D)
  std::vector<float> per_expert_scale;  // (E)
  std::vector<MatrixView> expert_gate_up;  // E × (2·Fe, D), gate rows first
  std::vector<MatrixView> expert_down;     // E × (D, Fe)
  std::vector<float> pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2;  // (D)
};

struct ModelWeights {
  MatrixView embed;                    // (V, D), also the tied output head
  std::vector<float> final_norm;       // (D)
  std::vector<LayerWeights> layers;    // (L)
  // PLE globals.
  MatrixView ple_embed;                // (V_ple, L·P)
  MatrixView ple_model_proj;           // (L·P, D)
  std::vector<float> ple_proj_norm;    // (P)
  uint64_t matrix_bytes = 0;           // bytes of all matrices (streamed per decoded token)
  DType checkpoint_dtype = DType::kBF16;  // the embedding's dtype on disk (before quantizing)
  bool mmapped = false;
  std::string prefix = "model.";       // the checkpoint's tensor-name prefix ("model.language_model." ...)

  std::shared_ptr<void> storage;       // owns the memory the views point into
};

enum class WeightKind {
  kMatrix,   // (out, in) projection or embedding
  kExperts,  // (E, out, in) stack of expert matrices
  kNorm,     // RMSNorm weight (Gemma 4: multiplies; Gemma 3: stored as w - 1)
  kScale,    // other vectors (router per-expert scale)
  kScalar,   // layer_scalar
};

// One tensor of the Hugging Face layout and, when loading, where it goes.
struct WeightSlot {
  std::string name;
  std::vector<int64_t> shape;
  WeightKind kind = WeightKind::kMatrix;
  MatrixView* matrix = nullptr;
  std::vector<MatrixView>* experts = nullptr;
  std::vector<float>* vec = nullptr;
  float* scalar = nullptr;
  float add = 0.f;  // Gemma 3 norms store w - 1
};

// Every tensor a config calls for, in checkpoint order, with names under `prefix`
// ("model." for text-only exports, "model.language_model." for multimodal ones).
// With dest, the slots point into it; ignored receives tensors that may be present but are
// unused (k/v of KV-shared layers).
std::vector<WeightSlot> WeightSlots(const ModelConfig& c, const std::string& prefix, ModelWeights* dest = nullptr,
                                    std::set<std::string>* ignored = nullptr);

// Calls fn(matrix) for every matrix of the model (embedding/head, PLE, per-layer, experts).
template <class W, class Fn>
void ForEachMatrix(W& w, Fn fn) {
  for (auto* m : {&w.embed, &w.ple_embed, &w.ple_model_proj}) {
    if (!m->empty()) fn(*m);
  }
  for (auto& l : w.layers) {
    for (auto* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.ple_gate, &l.ple_proj, &l.router}) {
      if (!m->empty()) fn(*m);
    }
    for (auto& m : l.expert_gate_up) fn(m);
    for (auto& m : l.expert_down) fn(m);
  }
}

class SafetensorsSet;

// The prefix a checkpoint's decoder tensors sit under ("model.language_model.", "model.",
// "language_model.model." or ""), found from its embed_tokens.weight; `where` names it in the error.
Result<std::string> DetectWeightPrefix(const SafetensorsSet& set, const std::string& where);

enum class WeightLoadMode { kCopy, kMmap };

// Reads every tensor the config calls for, checking names and shapes. Missing, extra or
// mis-shaped tensors are named in the error; vision/audio tower tensors are skipped.
// Under tensor parallelism (tp.active()) each matrix is only the rank's share
// (model/tensor_parallel.h), read from the files into memory of its own (no mmap mode).
Result<ModelWeights> LoadWeights(const std::string& model_dir, const ModelConfig& config,
                                 WeightLoadMode mode = WeightLoadMode::kCopy, const TensorParallel& tp = {});

}  // namespace gk
