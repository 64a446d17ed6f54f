#include "model/tensor_parallel.h"

#include <algorithm>
#include <cstdlib>

namespace gk {

int LocalKvHeads(int kv_heads, int tp) { return kv_heads >= tp ? kv_heads / tp : 1; }

int FirstKvHead(int kv_heads, int tp, int rank) {
  return kv_heads >= tp ? rank * (kv_heads / tp) : rank / (tp / kv_heads);
}

namespace {

Status CheckKvHeads(int kv_heads, int tp, const std::string& what) {
  if (kv_heads <= 0 || (kv_heads % tp == 0) || (tp % kv_heads == 0)) return Status::Ok();
  return Status::Error(StrCat("--tp ", tp, " neither divides nor is a multiple of the ", kv_heads, " KV heads of ", what,
                              " (a KV head is split whole or replicated whole); choose a tp that does"));
}

}  // namespace

Result<ModelConfig> ShardModelConfig(const ModelConfig& c, int tp) {
  if (tp < 1) return Status::Error(StrCat("--tp must be at least 1, got ", tp));
  if (tp == 1) return c;
  if (c.num_heads % tp != 0) {
    return Status::Error(StrCat("--tp ", tp, " does not divide the model's ", c.num_heads, " query heads"));
  }
  if (c.intermediate_size % tp != 0) {
    return Status::Error(StrCat("--tp ", tp, " does not divide the model's MLP width ", c.intermediate_size));
  }
  if (c.enable_moe_block && c.moe_intermediate_size % tp != 0) {
    return Status::Error(StrCat("--tp ", tp, " does not divide the experts' width ", c.moe_intermediate_size));
  }
  GK_RETURN_IF_ERROR(CheckKvHeads(c.num_kv_heads, tp, "the sliding layers"));
  GK_RETURN_IF_ERROR(CheckKvHeads(c.num_global_kv_heads, tp, "the full-attention layers"));
  for (size_t l = 0; l < c.layer_kv_heads.size(); ++l) {
    GK_RETURN_IF_ERROR(CheckKvHeads(c.layer_kv_heads[l], tp, StrCat("layer ", l)));
  }
  ModelConfig s = c;
  s.num_heads = c.num_heads / tp;
  s.intermediate_size = c.intermediate_size / tp;
  s.moe_intermediate_size = c.moe_intermediate_size / tp;
  if (c.num_kv_heads > 0) s.num_kv_heads = LocalKvHeads(c.num_kv_heads, tp);
  if (c.num_global_kv_heads > 0) s.num_global_kv_heads = LocalKvHeads(c.num_global_kv_heads, tp);
  for (int& k : s.layer_kv_heads) {
    if (k > 0) k = LocalKvHeads(k, tp);
  }
  return s;
}

VocabRange VocabShard(int64_t vocab, int tp, int rank) {
  VocabRange r;
  r.per_rank = (vocab + tp - 1) / tp;
  r.begin = std::min<int64_t>(vocab, int64_t(rank) * r.per_rank);
  r.rows = std::min<int64_t>(r.per_rank, vocab - r.begin);
  return r;
}

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The layer index of "...layers.N.<rest>", or -1.
int LayerOf(const std::string& name) {
  const size_t at = name.rfind("layers.");
  if (at == std::string::npos) return -1;
  return std::atoi(name.c_str() + at + 7);
}

}  // namespace

TensorSlice SliceForRank(const std::string& name, const std::vector<int64_t>& full_shape, const ModelConfig& c, int tp,
                         int rank) {
  using K = TensorSlice::Kind;
  TensorSlice s;
  if (tp <= 1) return s;
  auto rows = [&](int64_t per, int64_t first) { return TensorSlice{K::kRows, first * per, per}; };
  if (EndsWith(name, "embed_tokens.weight") || EndsWith(name, "embed_tokens_per_layer.weight")) {
    const VocabRange v = VocabShard(full_shape[0], tp, rank);
    return TensorSlice{K::kRows, v.begin, v.rows};
  }
  const int l = LayerOf(name);
  if (l < 0) return s;
  const int64_t H = c.HeadDim(l), Nl = c.num_heads / tp;
  if (EndsWith(name, "self_attn.q_proj.weight")) return rows(Nl * H, rank);
  if (EndsWith(name, "self_attn.k_proj.weight") || EndsWith(name, "self_attn.v_proj.weight")) {
    const int K = c.KvHeads(l);
    return TensorSlice{K::kRows, int64_t(FirstKvHead(K, tp, rank)) * H, int64_t(LocalKvHeads(K, tp)) * H};
  }
  if (EndsWith(name, "self_attn.o_proj.weight")) return TensorSlice{K::kCols, rank * Nl * H, Nl * H};
  const int64_t F = c.MlpWidth(l) / tp;
  if (EndsWith(name, "mlp.gate_proj.weight") || EndsWith(name, "mlp.up_proj.weight")) return rows(F, rank);
  if (EndsWith(name, "mlp.down_proj.weight")) return TensorSlice{K::kCols, rank * F, F};
  const int64_t Fe = c.moe_intermediate_size / tp;
  if (EndsWith(name, "experts.gate_up_proj")) return TensorSlice{K::kExpertGateUpRows, rank * Fe, Fe};
  if (EndsWith(name, "experts.down_proj")) return TensorSlice{K::kExpertCols, rank * Fe, Fe};
  return s;  // norms, scalars, the router and the per-layer-input projections: every rank whole
}

}  // namespace gk
