// The Tunix (Flax NNX) parameter tree of Gemma and how each of its arrays is made from Hugging
// Face tensors, both directions, for base weights and for Qwix LoRA factors
// (../shared/spec/gemma4.md §3). Every transform is a permutation of the elements (a transpose
// of a 2-D or 3-D view), so conversions are exact in any dtype.
//
// Base weights (HF name -> Tunix path, shape):
//   embed_tokens                 -> embedder.input_embedding                (V, D)       as is
//   layers.l.self_attn.q_proj    -> layers.l.attn.q_einsum.w                (N, D, H)    (N·H, D) viewed (N, H, D), axes (0, 2, 1)
//   layers.l.self_attn.{k,v}_proj-> layers.l.attn.kv_einsum.w               (2, K, D, H) each (K·H, D) viewed (K, H, D), axes (0, 2, 1), stacked [k, v]
//   layers.l.self_attn.k_proj    -> layers.l.attn.k_einsum.w  (K=V layers)  (K, D, H)
//   layers.l.self_attn.o_proj    -> layers.l.attn.attn_vec_einsum.w         (N, H, D)    (D, N·H) viewed (D, N, H), axes (1, 2, 0)
//   layers.l.mlp.{gate,up,down}_proj -> layers.l.mlp.{gate,up,down}_proj.kernel  (in, out)  transposed
//   layers.l.self_attn.{q,k}_norm -> layers.l.attn._{query,key}_norm.scale; the four layer norms
//   -> layers.l.{pre_attention,post_attention,pre_ffw,post_ffw}_norm.scale; layer_scalar ->
//   layers.l.skip_scale; norm -> final_norm.scale (all as is: both sides compute x·w).
// Qwix LoRA factors (<weight>_lora_a / _lora_b on the module) <-> PEFT lora_A (r, in) / lora_B (out, r):
//   every one is a 2-D transpose of a view: q_einsum A (D, r) = PEFT Aᵀ, B (r, N, H) viewed
//   (r, N·H) = PEFT Bᵀ; kv_einsum has ONE A (D, r) for both k and v and B (r, 2, K, H);
//   attn_vec_einsum A (N, H, r) viewed (N·H, r) = PEFT Aᵀ, B (r, D) = PEFT Bᵀ; MLP kernels
//   A (in, r), B (r, out).
// Paths here are "."-joined; a checkpoint's own tree paths (from _METADATA) may end in "value"
// (NNX state): TunixKey drops that before matching.
// Supported: dense Gemma 4 and Gemma 3 text decoders (PLE and MoE layers are refused).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "util/result.h"

namespace gk {

enum class TunixTransform {
  kCopy,         // same element order
  kTranspose,    // HF (R, C) <-> Tunix (C, R)
  kHeadsIn,      // HF (G·H, D) <-> Tunix (G, D, H)   (q_einsum, k_einsum; kv_einsum per half)
  kHeadsOut,     // HF (D, N·H) <-> Tunix (N, H, D)   (attn_vec_einsum)
};

struct TunixArray {
  std::string path;                   // Tunix path, "."-joined
  std::vector<int64_t> shape;         // Tunix shape
  std::vector<std::string> hf;        // the HF tensors it holds (2 for kv_einsum: k then v)
  std::vector<int64_t> hf_shape;      // the shape of each HF tensor
  TunixTransform transform = TunixTransform::kCopy;
  int64_t groups = 1, head_dim = 1;   // G (or N) and H of the head transforms
};

// The base weights of a config, HF names under hf_prefix ("model." or "model.language_model.").
Result<std::vector<TunixArray>> TunixBaseLayout(const ModelConfig& c, const std::string& hf_prefix);

// HF tensors -> the Tunix array (hf: one pointer per TunixArray::hf), and back. elem: bytes per
// element (any dtype: the transforms only move elements).
void HfToTunix(const TunixArray& a, const std::vector<const uint8_t*>& hf, size_t elem, uint8_t* tunix);
void TunixToHf(const TunixArray& a, const uint8_t* tunix, size_t elem, const std::vector<uint8_t*>& hf);

// A Qwix LoRA factor array of the Tunix tree and the PEFT factor(s) it corresponds to.
struct QwixLoraArray {
  std::string path;                 // e.g. layers.3.attn.q_einsum.w_lora_a
  std::vector<int64_t> shape;       // Qwix shape
  std::vector<std::string> peft;    // PEFT keys (base_model.model.<module>.lora_{A,B}.weight); kv: k then v
  std::vector<int64_t> peft_shape;  // (r, in) or (out, r)
  int64_t rows = 0, cols = 0;       // the Qwix array viewed as (rows, cols) is the PEFT factor transposed
  bool shared_a = false;            // kv_einsum A: one Qwix array for both PEFT A's
};

// The Qwix factor arrays of every projection that carries a LoRA in a model with rank r, for
// modules named by HF module path (`<prefix>layers.l.self_attn.q_proj` ...). k_proj and v_proj
// of a sliding (or non-K=V) layer form one kv_einsum entry: both must be present.
Result<std::vector<QwixLoraArray>> QwixLoraLayout(const ModelConfig& c, const std::string& hf_prefix, int rank,
                                                  const std::vector<std::string>& peft_modules);

// Qwix factor bytes -> its PEFT factor(s) (one pointer per QwixLoraArray::peft), and back.
// PeftToQwix fails for kv_einsum when the two PEFT A factors differ: Qwix shares one A for K
// and V, so separately trained PEFT k/v factors have no exact Qwix form.
void QwixToPeft(const QwixLoraArray& a, const uint8_t* qwix, size_t elem, const std::vector<uint8_t*>& peft);
Status PeftToQwix(const QwixLoraArray& a, const std::vector<const uint8_t*>& peft, size_t elem, uint8_t* qwix);

// rows × cols -> cols × rows.
void Transpose2D(const uint8_t* in, int64_t rows, int64_t cols, size_t elem, uint8_t* out);

// A checkpoint tree path as this layout names it: keys joined by ".", a final "value" dropped.
std::string TunixKey(const std::vector<std::string>& tree_path);

}  // namespace gk
