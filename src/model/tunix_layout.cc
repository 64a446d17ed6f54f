#include "model/tunix_layout.h"

#include <cstring>
#include <map>

namespace gk {

void Transpose2D(const uint8_t* in, int64_t rows, int64_t cols, size_t elem, uint8_t* out) {
  // Blocks of 32 × 32 keep both sides' cache lines in use.
  constexpr int64_t B = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += B) {
    for (int64_t c0 = 0; c0 < cols; c0 += B) {
      for (int64_t r = r0; r < std::min(rows, r0 + B); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + B); ++c) {
          std::memcpy(out + (c * rows + r) * elem, in + (r * cols + c) * elem, elem);
        }
      }
    }
  }
}

std::string TunixKey(const std::vector<std::string>& tree_path) {
  std::string out;
  size_t n = tree_path.size();
  if (n > 1 && tree_path.back() == "value") --n;
  for (size_t i = 0; i < n; ++i) out += (i ? "." : "") + tree_path[i];
  return out;
}

Result<std::vector<TunixArray>> TunixBaseLayout(const ModelConfig& c, const std::string& p) {
  if (c.hidden_size_per_layer_input > 0 || c.enable_moe_block) {
    return Status::Error("Tunix layout: per-layer embeddings and MoE layers are not supported yet");
  }
  const int64_t D = c.hidden_size, N = c.num_heads, V = c.vocab_size;
  std::vector<TunixArray> out;
  auto vec = [&](std::string path, std::string hf, int64_t n) {
    out.push_back({std::move(path), {n}, {std::move(hf)}, {n}, TunixTransform::kCopy});
  };
  out.push_back({"embedder.input_embedding", {V, D}, {p + "embed_tokens.weight"}, {V, D}, TunixTransform::kCopy});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string hl = StrCat(p, "layers.", l, "."), tl = StrCat("layers.", l, ".");
    const int64_t H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
    vec(tl + "pre_attention_norm.scale", hl + "input_layernorm.weight", D);
    out.push_back({tl + "attn.q_einsum.w", {N, D, H}, {hl + "self_attn.q_proj.weight"}, {N * H, D},
                   TunixTransform::kHeadsIn, N, H});
    if (c.KEqV(l)) {
      out.push_back({tl + "attn.k_einsum.w", {K, D, H}, {hl + "self_attn.k_proj.weight"}, {K * H, D},
                     TunixTransform::kHeadsIn, K, H});
    } else {
      out.push_back({tl + "attn.kv_einsum.w", {2, K, D, H},
                     {hl + "self_attn.k_proj.weight", hl + "self_attn.v_proj.weight"}, {K * H, D},
                     TunixTransform::kHeadsIn, K, H});
    }
    out.push_back({tl + "attn.attn_vec_einsum.w", {N, H, D}, {hl + "self_attn.o_proj.weight"}, {D, N * H},
                   TunixTransform::kHeadsOut, N, H});
    vec(tl + "attn._query_norm.scale", hl + "self_attn.q_norm.weight", H);
    vec(tl + "attn._key_norm.scale", hl + "self_attn.k_norm.weight", H);
    vec(tl + "post_attention_norm.scale", hl + "post_attention_layernorm.weight", D);
    vec(tl + "pre_ffw_norm.scale", hl + "pre_feedforward_layernorm.weight", D);
    out.push_back({tl + "mlp.gate_proj.kernel", {D, F}, {hl + "mlp.gate_proj.weight"}, {F, D}, TunixTransform::kTranspose});
    out.push_back({tl + "mlp.up_proj.kernel", {D, F}, {hl + "mlp.up_proj.weight"}, {F, D}, TunixTransform::kTranspose});
    out.push_back({tl + "mlp.down_proj.kernel", {F, D}, {hl + "mlp.down_proj.weight"}, {D, F}, TunixTransform::kTranspose});
    vec(tl + "post_ffw_norm.scale", hl + "post_feedforward_layernorm.weight", D);
    if (c.arch == Arch::kGemma4) vec(tl + "skip_scale", hl + "layer_scalar", 1);
  }
  vec("final_norm.scale", p + "norm.weight", D);
  return out;
}

namespace {

// (G, H, D) <-> (G, D, H): per group a transpose of an (H, D) block.
void HeadsIn(const uint8_t* in, int64_t G, int64_t H, int64_t D, size_t elem, uint8_t* out, bool to_tunix) {
  for (int64_t g = 0; g < G; ++g) {
    if (to_tunix) Transpose2D(in + g * H * D * elem, H, D, elem, out + g * H * D * elem);
    else Transpose2D(in + g * H * D * elem, D, H, elem, out + g * H * D * elem);
  }
}

}  // namespace

void HfToTunix(const TunixArray& a, const std::vector<const uint8_t*>& hf, size_t elem, uint8_t* out) {
  int64_t n = 1;
  for (int64_t d : a.hf_shape) n *= d;
  switch (a.transform) {
    case TunixTransform::kCopy:
      std::memcpy(out, hf[0], size_t(n) * elem);
      break;
    case TunixTransform::kTranspose:
      Transpose2D(hf[0], a.hf_shape[0], a.hf_shape[1], elem, out);
      break;
    case TunixTransform::kHeadsIn:
      for (size_t i = 0; i < hf.size(); ++i) {  // kv_einsum: k at [0], v at [1]
        HeadsIn(hf[i], a.groups, a.head_dim, a.hf_shape[1], elem, out + i * size_t(n) * elem, true);
      }
      break;
    case TunixTransform::kHeadsOut:  // (D, N·H) -> (N·H, D)
      Transpose2D(hf[0], a.hf_shape[0], a.hf_shape[1], elem, out);
      break;
  }
}

void TunixToHf(const TunixArray& a, const uint8_t* in, size_t elem, const std::vector<uint8_t*>& hf) {
  int64_t n = 1;
  for (int64_t d : a.hf_shape) n *= d;
  switch (a.transform) {
    case TunixTransform::kCopy:
      std::memcpy(hf[0], in, size_t(n) * elem);
      break;
    case TunixTransform::kTranspose:
      Transpose2D(in, a.hf_shape[1], a.hf_shape[0], elem, hf[0]);
      break;
    case TunixTransform::kHeadsIn:
      for (size_t i = 0; i < hf.size(); ++i) {
        HeadsIn(in + i * size_t(n) * elem, a.groups, a.head_dim, a.hf_shape[1], elem, hf[i], false);
      }
      break;
    case TunixTransform::kHeadsOut:
      Transpose2D(in, a.hf_shape[1], a.hf_shape[0], elem, hf[0]);
      break;
  }
}

Result<std::vector<QwixLoraArray>> QwixLoraLayout(const ModelConfig& c, const std::string& p, int r,
                                                  const std::vector<std::string>& modules) {
  std::map<std::string, bool> have;
  for (const std::string& m : modules) have[m] = true;
  auto key = [](const std::string& module, char f) { return StrCat("base_model.model.", module, ".lora_", f, ".weight"); };
  std::vector<QwixLoraArray> out;
  const int64_t D = c.hidden_size, N = c.num_heads;
  size_t used = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string hl = StrCat(p, "layers.", l, "."), tl = StrCat("layers.", l, ".");
    const int64_t H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
    // A (in, r) = PEFT A (r, in)ᵀ; B (r, out...) = PEFT B (out, r)ᵀ.
    auto add = [&](const std::string& module, const std::string& path, const std::string& param,
                   std::vector<int64_t> a_shape, std::vector<int64_t> b_shape, int64_t in, int64_t outf) {
      if (!have.count(module)) return;
      ++used;
      out.push_back({path + "." + param + "_lora_a", a_shape, {key(module, 'A')}, {r, in}, in, r});
      out.push_back({path + "." + param + "_lora_b", b_shape, {key(module, 'B')}, {outf, r}, r, outf});
    };
    add(hl + "self_attn.q_proj", tl + "attn.q_einsum", "w", {D, r}, {r, N, H}, D, N * H);
    const std::string kmod = hl + "self_attn.k_proj", vmod = hl + "self_attn.v_proj";
    if (c.KEqV(l)) {
      add(kmod, tl + "attn.k_einsum", "w", {D, r}, {r, K, H}, D, K * H);
    } else if (have.count(kmod) || have.count(vmod)) {
      if (!have.count(kmod) || !have.count(vmod)) {
        return Status::Error(StrCat("Qwix LoRA: layer ", l, " fuses k_proj and v_proj into kv_einsum; the adapter has only ",
                                    have.count(kmod) ? "k_proj" : "v_proj"));
      }
      used += 2;
      QwixLoraArray a{tl + "attn.kv_einsum.w_lora_a", {D, r}, {key(kmod, 'A'), key(vmod, 'A')}, {r, D}, D, r, true};
      // B (r, 2, K, H): k's (r, K·H) block then v's; each is its PEFT B transposed.
      QwixLoraArray b{tl + "attn.kv_einsum.w_lora_b", {r, 2, K, H}, {key(kmod, 'B'), key(vmod, 'B')}, {K * H, r}, r, K * H};
      out.push_back(std::move(a));
      out.push_back(std::move(b));
    }
    add(hl + "self_attn.o_proj", tl + "attn.attn_vec_einsum", "w", {N, H, r}, {r, D}, N * H, D);
    add(hl + "mlp.gate_proj", tl + "mlp.gate_proj", "kernel", {D, r}, {r, F}, D, F);
    add(hl + "mlp.up_proj", tl + "mlp.up_proj", "kernel", {D, r}, {r, F}, D, F);
    add(hl + "mlp.down_proj", tl + "mlp.down_proj", "kernel", {F, r}, {r, D}, F, D);
  }
  if (used != modules.size()) {
    return Status::Error(StrCat("Qwix LoRA: ", modules.size() - used, " adapter module(s) are not projections of this model"));
  }
  return out;
}

namespace {

bool IsKvB(const QwixLoraArray& a) { return a.peft.size() == 2 && !a.shared_a; }

}  // namespace

void QwixToPeft(const QwixLoraArray& a, const uint8_t* qwix, size_t elem, const std::vector<uint8_t*>& peft) {
  if (IsKvB(a)) {  // (r, 2·K·H): per rank row, k's K·H values then v's
    const int64_t r = a.rows, kh = a.cols;
    for (int64_t i = 0; i < r; ++i) {
      for (int half = 0; half < 2; ++half) {
        for (int64_t j = 0; j < kh; ++j) {
          std::memcpy(peft[size_t(half)] + (j * r + i) * elem, qwix + (i * 2 * kh + half * kh + j) * elem, elem);
        }
      }
    }
    return;
  }
  for (uint8_t* dst : peft) Transpose2D(qwix, a.rows, a.cols, elem, dst);
}

Status PeftToQwix(const QwixLoraArray& a, const std::vector<const uint8_t*>& peft, size_t elem, uint8_t* qwix) {
  const size_t n = size_t(a.rows * a.cols) * elem;
  if (a.shared_a && std::memcmp(peft[0], peft[1], n) != 0) {
    return Status::Error(StrCat(a.path, ": the PEFT adapter has different lora_A factors for k_proj and v_proj; "
                                "Qwix's fused kv_einsum shares one (convert to an HF merge or PEFT instead)"));
  }
  if (IsKvB(a)) {
    const int64_t r = a.rows, kh = a.cols;
    for (int64_t i = 0; i < r; ++i) {
      for (int half = 0; half < 2; ++half) {
        for (int64_t j = 0; j < kh; ++j) {
          std::memcpy(qwix + (i * 2 * kh + half * kh + j) * elem, peft[size_t(half)] + (j * r + i) * elem, elem);
        }
      }
    }
    return Status::Ok();
  }
  Transpose2D(peft[0], a.cols, a.rows, elem, qwix);
  return Status::Ok();
}

}  // namespace gk
