#include "tools/plan/sharding.h"

#include <charconv>

namespace gk::plan {
namespace {

constexpr Axis N = Axis::kNone, F = Axis::kFsdp, T = Axis::kTp;

int MeshSize(Axis a, const Mesh& m) { return a == F ? m.fsdp : a == T ? m.tp : 1; }
const char* AxisName(Axis a) { return a == F ? "fsdp" : a == T ? "tp" : "None"; }

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += StrCat(i ? ", " : "", s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// A layer "type" as the tensors of its group name it: sliding / full (K=V or not).
struct LayerKind {
  std::string tag;
  int count = 0;
  int layer = 0;  // a representative layer index
};

std::vector<LayerKind> Kinds(const ModelConfig& c) {
  std::vector<LayerKind> kinds;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string tag = c.IsFull(l) ? "full" : "sliding";
    bool found = false;
    for (LayerKind& k : kinds) {
      if (k.tag == tag && c.MlpWidth(k.layer) == c.MlpWidth(l)) {
        ++k.count;
        found = true;
      }
    }
    if (!found) kinds.push_back({tag, 1, l});
  }
  // The same type with a second MLP width (E2B's double-wide layers) gets its own name.
  for (size_t i = 0; i < kinds.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (kinds[j].tag == kinds[i].tag) kinds[i].tag += StrCat("-mlp", c.MlpWidth(kinds[i].layer));
    }
  }
  return kinds;
}

std::string HeadDimName(const ModelConfig& c, int l) { return c.IsFull(l) ? "global_head_dim" : "head_dim"; }
std::string KvHeadsName(const ModelConfig& c, int l) { return c.KEqV(l) ? "num_global_key_value_heads" : "num_key_value_heads"; }

}  // namespace

std::string Mesh::Text() const { return StrCat("fsdp=", fsdp, ",tp=", tp); }

Result<Mesh> ParseMesh(const std::string& text) {
  Mesh m;
  bool seen_f = false, seen_t = false;
  size_t pos = 0;
  if (text.empty()) return Status::Error("--mesh: empty; expected fsdp=F,tp=T");
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return Status::Error(StrCat("--mesh ", text, ": '", item, "' is not AXIS=SIZE (expected fsdp=F,tp=T)"));
    const std::string axis = item.substr(0, eq), value = item.substr(eq + 1);
    int v = 0;
    const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size() || value.empty()) {
      return Status::Error(StrCat("--mesh ", text, ": ", axis, "=", value, " is not an integer"));
    }
    if (v < 1) return Status::Error(StrCat("--mesh ", text, ": ", axis, " must be >= 1, got ", v));
    if (axis == "fsdp" && !seen_f) {
      m.fsdp = v;
      seen_f = true;
    } else if (axis == "tp" && !seen_t) {
      m.tp = v;
      seen_t = true;
    } else {
      return Status::Error(StrCat("--mesh ", text, ": unknown or repeated axis '", axis, "' (axes: fsdp, tp)"));
    }
    pos = end + 1;
  }
  return m;
}

std::string SpecText(const Spec& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += StrCat(i ? ", " : "", AxisName(s[i]));
  return t + (s.size() == 1 ? ",)" : ")");
}

int64_t TensorGroup::Elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorGroup::ElementsPerDevice(const Mesh& m) const {
  int64_t n = Elements();
  for (Axis a : effective) n /= MeshSize(a, m);
  return n;
}

std::vector<TensorGroup> BaseTensors(const ModelConfig& c) {
  const int64_t V = c.vocab_size, D = c.hidden_size, Nh = c.num_heads;
  std::vector<TensorGroup> t;
  t.push_back({"embedder.input_embedding", {V, D}, {"vocab_size", "hidden_size"}, {T, F}, {}, 1});
  t.push_back({"final_norm.scale", {D}, {"hidden_size"}, {T}, {}, 1});
  const int64_t P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  if (P > 0) {  // per_layer_input_embedding (tp, fsdp), per_layer_model_projection (fsdp, tp)
    const std::string lp = "num_hidden_layers·hidden_size_per_layer_input";
    t.push_back({"embedder.per_layer_input_embedding", {c.vocab_size_per_layer_input, LP},
                 {"vocab_size_per_layer_input", lp}, {T, F}, {}, 1});
    t.push_back({"embedder.per_layer_model_projection.w", {D, LP}, {"hidden_size", lp}, {F, T}, {}, 1});
    t.push_back({"embedder.per_layer_projection_norm.scale", {P}, {"hidden_size_per_layer_input"}, {T}, {}, 1});
  }
  for (const LayerKind& k : Kinds(c)) {
    const int l = k.layer;
    const int64_t H = c.HeadDim(l), K = c.KvHeads(l), Fw = c.MlpWidth(l);
    const std::string p = StrCat("layers.<", k.tag, ">.");
    const std::string hd = HeadDimName(c, l), kv = KvHeadsName(c, l);
    t.push_back({p + "attn.q_einsum.w", {Nh, D, H}, {"num_attention_heads", "hidden_size", hd}, {T, F, N}, {}, k.count});
    if (c.KEqV(l)) {
      t.push_back({p + "attn.k_einsum.w", {K, D, H}, {kv, "hidden_size", hd}, {T, F, N}, {}, k.count});
    } else {
      t.push_back({p + "attn.kv_einsum.w", {2, K, D, H}, {"k|v", kv, "hidden_size", hd}, {N, T, F, N}, {}, k.count});
    }
    t.push_back({p + "attn.attn_vec_einsum.w", {Nh, H, D}, {"num_attention_heads", hd, "hidden_size"}, {T, N, F}, {}, k.count});
    t.push_back({p + "mlp.gate_proj.kernel", {D, Fw}, {"hidden_size", "intermediate_size"}, {F, T}, {}, k.count});
    t.push_back({p + "mlp.up_proj.kernel", {D, Fw}, {"hidden_size", "intermediate_size"}, {F, T}, {}, k.count});
    t.push_back({p + "mlp.down_proj.kernel", {Fw, D}, {"intermediate_size", "hidden_size"}, {T, F}, {}, k.count});
    t.push_back({p + "attn._query_norm.scale", {H}, {hd}, {T}, {}, k.count});
    t.push_back({p + "attn._key_norm.scale", {H}, {hd}, {T}, {}, k.count});
    t.push_back({p + "{pre_attention,post_attention,pre_ffw,post_ffw}_norm.scale", {D}, {"hidden_size"}, {T}, {}, 4 * k.count});
    t.push_back({p + "skip_scale", {1}, {"layer_scalar"}, {N}, {}, k.count});
    if (P > 0) {  // per_layer_input_gate (fsdp, tp), per_layer_projection (tp, fsdp)
      t.push_back({p + "per_layer_input_gate.w", {D, P}, {"hidden_size", "hidden_size_per_layer_input"}, {F, T}, {}, k.count});
      t.push_back({p + "per_layer_projection.w", {P, D}, {"hidden_size_per_layer_input", "hidden_size"}, {T, F}, {}, k.count});
      t.push_back({p + "post_per_layer_input_norm.scale", {D}, {"hidden_size"}, {T}, {}, k.count});
    }
    if (c.enable_moe_block) {  // exp_weight_edf (fsdp, None, None, tp), exp_weight_efd (fsdp, tp, None); router replicated
      const int64_t E = c.num_experts, Fe = c.moe_intermediate_size;
      t.push_back({p + "moe.router_logits", {D, E}, {"hidden_size", "num_experts"}, {N, N}, {}, k.count});
      t.push_back({p + "moe.router_scale", {D}, {"hidden_size"}, {N}, {}, k.count});
      t.push_back({p + "moe.per_expert_scale", {E}, {"num_experts"}, {N}, {}, k.count});
      t.push_back({p + "moe.gating_einsum", {E, 2, Fe, D}, {"num_experts", "gate|up", "moe_intermediate_size", "hidden_size"},
                   {F, N, N, T}, {}, k.count});
      t.push_back({p + "moe.linear", {E, Fe, D}, {"num_experts", "moe_intermediate_size", "hidden_size"}, {F, T, N}, {}, k.count});
      t.push_back({p + "{moe_pre_ffw,moe_post_ffw,dense_post_ffw}_norm.scale", {D}, {"hidden_size"}, {T}, {}, 3 * k.count});
    }
  }
  return t;
}

std::vector<TensorGroup> LoraTensors(const ModelConfig& c, int r) {
  std::vector<TensorGroup> out;
  for (const TensorGroup& b : BaseTensors(c)) {
    const std::string& n = b.name;
    auto add = [&](const char* suffix, std::vector<int64_t> shape, std::vector<std::string> dims) {
      out.push_back({n.substr(0, n.rfind('.')) + suffix, std::move(shape), std::move(dims), b.spec, {}, b.count});
    };
    const auto& s = b.shape;
    const auto& d = b.dims;
    if (n.ends_with("q_einsum.w")) {  // (N, D, H): A (D, r), B (r, N, H)
      add(".w_lora_a", {s[1], r}, {d[1], "rank"});
      add(".w_lora_b", {r, s[0], s[2]}, {"rank", d[0], d[2]});
    } else if (n.ends_with("kv_einsum.w")) {  // (2, K, D, H): A (D, r) shared by K and V, B (r, 2, K, H)
      add(".w_lora_a", {s[2], r}, {d[2], "rank"});
      add(".w_lora_b", {r, s[0], s[1], s[3]}, {"rank", d[0], d[1], d[3]});
    } else if (n.ends_with("attn_vec_einsum.w")) {  // (N, H, D): A (N, H, r), B (r, D)
      add(".w_lora_a", {s[0], s[1], r}, {d[0], d[1], "rank"});
      add(".w_lora_b", {r, s[2]}, {"rank", d[2]});
    } else if (n.ends_with("_proj.kernel")) {  // (in, out): A (in, r), B (r, out)
      add(".kernel_lora_a", {s[0], r}, {d[0], "rank"});
      add(".kernel_lora_b", {r, s[1]}, {"rank", d[1]});
    }
  }
  return out;
}

Status CheckBaseSharding(std::vector<TensorGroup>& base, const Mesh& m) {
  for (TensorGroup& t : base) {
    for (size_t i = 0; i < t.spec.size(); ++i) {
      const int n = MeshSize(t.spec[i], m);
      if (t.shape[i] % n != 0) {
        return Status::Error(StrCat(AxisName(t.spec[i]), "=", n, " does not divide ", t.dims[i], "=", t.shape[i],
                                    ": axis ", i, " of ", t.name, " ", ShapeText(t.shape), " has spec ", SpecText(t.spec),
                                    " (", t.count, " tensors); use a ", AxisName(t.spec[i]), " that divides ", t.shape[i]));
      }
    }
    t.effective = t.spec;
  }
  return Status::Ok();
}

void FilterInheritedSpecs(std::vector<TensorGroup>& ts, const Mesh& m) {
  for (TensorGroup& t : ts) {
    if (t.spec.size() != t.shape.size()) {
      t.effective.assign(t.shape.size(), Axis::kNone);
      continue;
    }
    t.effective = t.spec;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (t.shape[i] % MeshSize(t.spec[i], m) != 0) t.effective[i] = Axis::kNone;
    }
  }
}

int64_t TotalElements(const std::vector<TensorGroup>& t) {
  int64_t n = 0;
  for (const TensorGroup& g : t) n += g.Elements() * g.count;
  return n;
}

int64_t ElementsPerDevice(const std::vector<TensorGroup>& t, const Mesh& m) {
  int64_t n = 0;
  for (const TensorGroup& g : t) n += g.ElementsPerDevice(m) * g.count;
  return n;
}

}  // namespace gk::plan
