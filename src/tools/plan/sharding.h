// Sharding of a Gemma 4 model over a (fsdp, tp) device mesh, the way the reference case's
// Tunix run laid it out (../shared/paper/FACTS.md §1.4, spec/gemma4.md §3): every weight in
// the Tunix layout with Tunix's default partition spec, LoRA factors in the Qwix layout.
//   base weights: the spec as given; a sharded axis its mesh axis does not divide is an
//     error (JAX refuses such an array; this is why tp=8 fails for 31B);
//   LoRA factors and optimizer state inherit the base spec, filtered as the reference case
//     fixed it: a spec whose rank differs from the tensor's is replaced by full replication,
//     and any axis its mesh axis does not divide is replicated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "util/result.h"

namespace gk::plan {

struct Mesh {
  int fsdp = 1, tp = 1;
  int Size() const { return fsdp * tp; }
  std::string Text() const;  // "fsdp=1,tp=4"
};
// "fsdp=F,tp=T" (either order; a missing axis is 1). Zero, negative, non-integer or unknown
// axes are errors.
Result<Mesh> ParseMesh(const std::string& text);

enum class Axis { kNone, kFsdp, kTp };
using Spec = std::vector<Axis>;
std::string SpecText(const Spec& s);  // "(tp, fsdp, None)"; "()" = replicated

// One tensor shape that `count` tensors of the model share (e.g. the q_einsum of the 50
// sliding layers).
struct TensorGroup {
  std::string name;                // Tunix path, layer index as a type: "layers.<sliding>.attn.q_einsum.w"
  std::vector<int64_t> shape;
  std::vector<std::string> dims;   // what each axis counts: "num_attention_heads", "hidden_size", ...
  Spec spec;                       // as declared (base: Tunix's; LoRA: inherited from the base)
  Spec effective;                  // after the reference case's filter (LoRA, optimizer state)
  int count = 1;
  int64_t Elements() const;                        // one tensor
  int64_t ElementsPerDevice(const Mesh& m) const;  // one tensor, `effective` spec
};

// The base weights of the text decoder in the Tunix layout with Tunix's default specs
// (emb_vd (tp, fsdp), q_weight_ndh (tp, fsdp, None) also for k_einsum, kv_weight_cndh
// (None, tp, fsdp, None), o_weight_nhd (tp, None, fsdp), ffw_weight_df (fsdp, tp),
// ffw_weight_fd (tp, fsdp), norms (tp); E2B/E4B's per-layer embeddings: per_layer_input_embedding
// (tp, fsdp), per_layer_model_projection and per_layer_input_gate (fsdp, tp),
// per_layer_projection (tp, fsdp); 26B-A4B's experts: gating_einsum (fsdp, None, None, tp),
// linear (fsdp, tp, None), the router replicated). Tunix builds every layer alike, so the
// KV-shared layers of E2B/E4B hold (unused) k/v weights as their checkpoints do.
std::vector<TensorGroup> BaseTensors(const ModelConfig& c);
// Qwix LoRA factors of rank r on the reference case's TPU target set (q_einsum, kv_einsum,
// attn_vec_einsum, gate/up/down; its regex misses the k_einsum of K=V layers, FACTS §7),
// each inheriting its base weight's spec.
std::vector<TensorGroup> LoraTensors(const ModelConfig& c, int rank);

// Base weights: error naming the first tensor, axis and config field a mesh axis does not
// divide. Sets `effective` = `spec` on success.
Status CheckBaseSharding(std::vector<TensorGroup>& base, const Mesh& m);
// LoRA / optimizer state: fills `effective` with the filtered spec (never fails).
void FilterInheritedSpecs(std::vector<TensorGroup>& t, const Mesh& m);

int64_t TotalElements(const std::vector<TensorGroup>& t);
int64_t ElementsPerDevice(const std::vector<TensorGroup>& t, const Mesh& m);

}  // namespace gk::plan
