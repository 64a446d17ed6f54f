#include "model/weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "formats/safetensors.h"
#include "util/anonymous_memory.h"
#include "model/quantize.h"
#include "model/tensor_parallel.h"

namespace gk {
namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool IsSkipped(const std::string& name) {
  static const char* kSkip[] = {"model.vision_tower.", "model.embed_vision.", "model.audio_tower.",
                                "model.embed_audio.", "vision_tower.", "multi_modal_projector.",
                                "model.multi_modal_projector.", "lm_head.weight", "vision_model."};
  for (const char* p : kSkip) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<WeightSlot> WeightSlots(const ModelConfig& c, const std::string& p, ModelWeights* w,
                                    std::set<std::string>* ignored) {
  ModelWeights unused;
  if (!w) w = &unused;  // names and shapes only; the pointers are not used
  std::set<std::string> unused_ignored;
  if (!ignored) ignored = &unused_ignored;
  const int64_t D = c.hidden_size, N = c.num_heads, V = c.vocab_size;
  const float fold = c.arch == Arch::kGemma3 ? 1.f : 0.f;
  std::vector<WeightSlot> e;
  auto mat = [&](std::string n, std::vector<int64_t> s, MatrixView* m) {
    WeightSlot x{std::move(n), std::move(s), WeightKind::kMatrix};
    x.matrix = m;
    e.push_back(std::move(x));
  };
  auto vec = [&](std::string n, int64_t len, std::vector<float>* v, float add, WeightKind kind = WeightKind::kNorm) {
    WeightSlot x{std::move(n), {len}, kind};
    x.vec = v;
    x.add = add;
    e.push_back(std::move(x));
  };
  mat(p + "embed_tokens.weight", {V, D}, &w->embed);
  vec(p + "norm.weight", D, &w->final_norm, fold);
  const int64_t P = c.hidden_size_per_layer_input, L = c.num_layers;
  if (P > 0) {
    mat(p + "embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P}, &w->ple_embed);
    mat(p + "per_layer_model_projection.weight", {L * P, D}, &w->ple_model_proj);
    vec(p + "per_layer_projection_norm.weight", P, &w->ple_proj_norm, 0.f);
  }
  w->layers.resize(size_t(L));
  for (int l = 0; l < L; ++l) {
    LayerWeights& lw = w->layers[size_t(l)];
    const std::string lp = p + "layers." + std::to_string(l) + ".";
    const int64_t H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
    vec(lp + "input_layernorm.weight", D, &lw.input_norm, fold);
    vec(lp + "post_attention_layernorm.weight", D, &lw.post_attn_norm, fold);
    vec(lp + "pre_feedforward_layernorm.weight", D, &lw.pre_ffw_norm, fold);
    vec(lp + "post_feedforward_layernorm.weight", D, &lw.post_ffw_norm, fold);
    mat(lp + "self_attn.q_proj.weight", {N * H, D}, &lw.q);
    vec(lp + "self_attn.q_norm.weight", H, &lw.q_norm, fold);
    if (c.IsKvShared(l)) {  // these layers read another layer's cache; their k/v are unused
      for (const char* n : {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight"}) {
        ignored->insert(lp + n);
      }
    } else {
      mat(lp + "self_attn.k_proj.weight", {K * H, D}, &lw.k);
      vec(lp + "self_attn.k_norm.weight", H, &lw.k_norm, fold);
      if (!c.KEqV(l)) mat(lp + "self_attn.v_proj.weight", {K * H, D}, &lw.v);
    }
    mat(lp + "self_attn.o_proj.weight", {D, N * H}, &lw.o);
    mat(lp + "mlp.gate_proj.weight", {F, D}, &lw.gate);
    mat(lp + "mlp.up_proj.weight", {F, D}, &lw.up);
    mat(lp + "mlp.down_proj.weight", {D, F}, &lw.down);
    if (c.arch == Arch::kGemma4) {
      WeightSlot s{lp + "layer_scalar", {1}, WeightKind::kScalar};
      s.scalar = &lw.layer_scalar;
      e.push_back(std::move(s));
    }
    if (P > 0) {
      mat(lp + "per_layer_input_gate.weight", {P, D}, &lw.ple_gate);
      mat(lp + "per_layer_projection.weight", {D, P}, &lw.ple_proj);
      vec(lp + "post_per_layer_input_norm.weight", D, &lw.post_ple_norm, 0.f);
    }
    if (c.enable_moe_block) {
      const int64_t E = c.num_experts, Fe = c.moe_intermediate_size;
      mat(lp + "router.proj.weight", {E, D}, &lw.router);
      vec(lp + "router.scale", D, &lw.router_scale, 0.f);
      vec(lp + "router.per_expert_scale", E, &lw.per_expert_scale, 0.f, WeightKind::kScale);
      WeightSlot gu{lp + "experts.gate_up_proj", {E, 2 * Fe, D}, WeightKind::kExperts};
      gu.experts = &lw.expert_gate_up;
      e.push_back(std::move(gu));
      WeightSlot dn{lp + "experts.down_proj", {E, D, Fe}, WeightKind::kExperts};
      dn.experts = &lw.expert_down;
      e.push_back(std::move(dn));
      vec(lp + "pre_feedforward_layernorm_2.weight", D, &lw.pre_ffw_norm_2, 0.f);
      vec(lp + "post_feedforward_layernorm_1.weight", D, &lw.post_ffw_norm_1, 0.f);
      vec(lp + "post_feedforward_layernorm_2.weight", D, &lw.post_ffw_norm_2, 0.f);
    }
  }
  return e;
}

namespace {

Status CheckNamesAndShapes(const SafetensorsSet& set, const std::vector<WeightSlot>& expected,
                           const std::set<std::string>& ignored, const std::string& dir) {
  std::set<std::string> wanted;
  std::vector<std::string> missing;
  for (const WeightSlot& x : expected) {
    wanted.insert(x.name);
    const TensorInfo* t = set.Find(x.name);
    if (!t) {
      missing.push_back(x.name);
      continue;
    }
    if (t->shape != x.shape) {
      return Status::Error(StrCat(dir, ": tensor ", x.name, " has shape ", ShapeStr(t->shape), ", config.json implies ",
                                  ShapeStr(x.shape)));
    }
    if (t->dtype == DType::kI8 && (x.matrix || x.experts)) {  // Q8_0 codes (model/quantize.h)
      GK_RETURN_IF_ERROR(CheckQ8Tensor(set, *t, dir));
      wanted.insert(Q8ScaleName(x.name));
      continue;
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
      return Status::Error(StrCat(dir, ": tensor ", x.name, " has dtype ", DTypeName(t->dtype),
                                  "; expected F32, BF16 or F16 (or I8 with block scales)"));
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", " : "") + missing[i];
    if (missing.size() > 5) list += StrCat(" and ", missing.size() - 5, " more");
    return Status::Error(StrCat(dir, ": ", missing.size(), " tensor(s) missing: ", list));
  }
  std::vector<std::string> extra;
  for (const std::string& n : set.Names()) {
    if (!wanted.count(n) && !ignored.count(n) && !IsSkipped(n)) extra.push_back(n);
  }
  if (!extra.empty()) {
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", " : "") + extra[i];
    if (extra.size() > 5) list += StrCat(" and ", extra.size() - 5, " more");
    return Status::Error(StrCat(dir, ": ", extra.size(), " unexpected tensor(s) not in the architecture config.json describes: ", list));
  }
  return Status::Ok();
}



}  // namespace

Result<std::string> DetectWeightPrefix(const SafetensorsSet& set, const std::string& where) {
  for (const char* p : {"model.language_model.", "model.", "language_model.model.", ""}) {
    if (set.Find(std::string(p) + "embed_tokens.weight")) return std::string(p);
  }
  return Status::Error(StrCat(where, ": no embed_tokens.weight tensor (looked for model.language_model.embed_tokens.weight "
                              "and model.embed_tokens.weight); is this a Gemma checkpoint?"));
}

namespace {

// The shape of a rank's share of a tensor (model/tensor_parallel.h).
std::vector<int64_t> SlicedShape(std::vector<int64_t> shape, const TensorSlice& s) {
  using K = TensorSlice::Kind;
  switch (s.kind) {
    case K::kWhole: break;
    case K::kRows: shape[0] = s.count; break;
    case K::kCols: shape[1] = s.count; break;
    case K::kExpertGateUpRows: shape[1] = 2 * s.count; break;
    case K::kExpertCols: shape[2] = s.count; break;
  }
  return shape;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Reads a rank's share of tensor t, in its stored dtype, into dst: row ranges with one pread
// each, column ranges from the file's mapping (only their pages are read).
Status ReadSlice(const SafetensorsSet& set, const TensorInfo& t, const TensorSlice& s, uint8_t* dst) {
  using K = TensorSlice::Kind;
  const size_t es = DTypeSize(t.dtype);
  auto read_rows = [&](uint64_t first_byte, uint64_t nbytes) {
    TensorInfo part = t;
    part.offset += first_byte;
    part.nbytes = nbytes;
    Status st = set.ReadInto(part, dst);
    dst += nbytes;
    return st;
  };
  const int64_t cols = t.shape.back();
  const uint64_t row_bytes = uint64_t(cols) * es;
  switch (s.kind) {
    case K::kWhole: return set.ReadInto(t, dst);
    case K::kRows: return read_rows(uint64_t(s.begin) * row_bytes, uint64_t(s.count) * row_bytes);
    case K::kExpertGateUpRows: {
      const int64_t rows = t.shape[1], half = rows / 2;
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        for (int64_t h : {int64_t(0), half}) {
          GK_RETURN_IF_ERROR(read_rows(uint64_t(e * rows + h + s.begin) * row_bytes, uint64_t(s.count) * row_bytes));
        }
      }
      return Status::Ok();
    }
    case K::kCols:
    case K::kExpertCols: {
      GK_ASSIGN_OR_RETURN(const uint8_t* src, set.Map(t));
      const int64_t rows = t.numel() / cols;  // every expert's rows, one after another
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(dst, src + uint64_t(r) * row_bytes + uint64_t(s.begin) * es, size_t(s.count) * es);
        dst += size_t(s.count) * es;
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ModelWeights> LoadWeights(const std::string& dir, const ModelConfig& c, WeightLoadMode mode,
                                 const TensorParallel& tp) {
  GK_ASSIGN_OR_RETURN(SafetensorsSet set, SafetensorsSet::Open(dir));
  GK_ASSIGN_OR_RETURN(std::string prefix, DetectWeightPrefix(set, dir));
  ModelWeights w;
  std::set<std::string> ignored;
  std::vector<WeightSlot> expected = WeightSlots(c, prefix, &w, &ignored);
  GK_RETURN_IF_ERROR(CheckNamesAndShapes(set, expected, ignored, dir));
  // A rank of a tensor-parallel group reads only its share of each matrix, into its own memory.
  std::vector<TensorSlice> slices(expected.size());
  if (tp.active()) {
    mode = WeightLoadMode::kCopy;
    for (size_t i = 0; i < expected.size(); ++i) {
      const WeightSlot& x = expected[i];
      if (!x.matrix && !x.experts) continue;
      if (set.Find(x.name)->dtype == DType::kI8) {
        return Status::Error(StrCat(dir, ": tensor parallelism reads bf16, f16 or f32 checkpoints; ", x.name,
                                    " is quantized (I8); load the unquantized checkpoint with --quantize q8_0 instead"));
      }
      slices[i] = SliceForRank(x.name, x.shape, c, tp.size, tp.rank);
    }
  }

  // Matrices: f16 widens to f32; f32/bf16 keep their bytes (or, in mmap mode, their pages).
  auto local_bytes = [&](const TensorInfo& t, const TensorSlice& s) {
    return uint64_t(Numel(SlicedShape(t.shape, s))) * DTypeSize(t.dtype == DType::kF16 ? DType::kF32 : t.dtype);
  };
  size_t total = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const WeightSlot& x = expected[i];
    if (!x.matrix && !x.experts) continue;
    const TensorInfo& t = *set.Find(x.name);
    if (t.dtype == DType::kI8) total += Q8TensorBytes(t.shape);  // Q8_0: repacked, also in mmap mode
    else if (mode == WeightLoadMode::kCopy || t.dtype == DType::kF16) total += (local_bytes(t, slices[i]) + 63) / 64 * 64;
  }
  auto storage = AllocateAnonymous(total);
  if (!storage) return Result<ModelWeights>::Error(StrCat("cannot allocate ", total, " bytes for the weights"));
  uint8_t* cursor = static_cast<uint8_t*>(storage.get());
  std::vector<uint8_t> tmp;
  for (size_t i = 0; i < expected.size(); ++i) {
    const WeightSlot& x = expected[i];
    const TensorInfo& t = *set.Find(x.name);
    const DType dt = t.dtype == DType::kF16 ? DType::kF32 : t.dtype;
    const uint8_t* data = nullptr;
    if ((x.matrix || x.experts) && t.dtype == DType::kI8) {  // Q8_0 codes + scales (model/quantize.h)
      GK_RETURN_IF_ERROR(ReadQ8Tensor(set, t, x, cursor));
      cursor += Q8TensorBytes(t.shape);
      w.matrix_bytes += Q8TensorBytes(t.shape);
      continue;
    }
    if (x.matrix || x.experts) {
      const std::vector<int64_t> shape = SlicedShape(x.shape, slices[i]);
      const int64_t numel = Numel(shape);
      if (mode == WeightLoadMode::kMmap && t.dtype != DType::kF16) {
        GK_ASSIGN_OR_RETURN(data, set.Map(t));
      } else if (t.dtype == DType::kF16) {
        tmp.resize(size_t(numel) * 2);
        GK_RETURN_IF_ERROR(ReadSlice(set, t, slices[i], tmp.data()));
        WidenToF32(t.dtype, tmp.data(), numel, reinterpret_cast<float*>(cursor));
        data = cursor;
        cursor += (local_bytes(t, slices[i]) + 63) / 64 * 64;
      } else {
        GK_RETURN_IF_ERROR(ReadSlice(set, t, slices[i], cursor));
        data = cursor;
        cursor += (local_bytes(t, slices[i]) + 63) / 64 * 64;
      }
      w.matrix_bytes += uint64_t(numel) * DTypeSize(dt);
      if (x.matrix) {
        *x.matrix = MatrixView{dt, shape[0], shape[1], data};
      } else {
        const int64_t per = shape[1] * shape[2] * int64_t(DTypeSize(dt));
        for (int64_t ex = 0; ex < shape[0]; ++ex) {
          x.experts->push_back(MatrixView{dt, shape[1], shape[2], data + ex * per});
        }
      }
      continue;
    }
    tmp.resize(t.nbytes);
    GK_RETURN_IF_ERROR(set.ReadInto(t, tmp.data()));
    std::vector<float> f(size_t(t.numel()));
    WidenToF32(t.dtype, tmp.data(), t.numel(), f.data());
    for (float& v : f) v += x.add;
    if (x.scalar) *x.scalar = f[0];
    else *x.vec = std::move(f);
  }
  // Quantized checkpoints keep the dtype they were made from in config.json.
  w.checkpoint_dtype = set.Find(prefix + "embed_tokens.weight")->dtype;
  if (w.checkpoint_dtype != DType::kF32 && w.checkpoint_dtype != DType::kF16) {
    w.checkpoint_dtype = c.torch_dtype == "float32" ? DType::kF32 : c.torch_dtype == "float16" ? DType::kF16 : DType::kBF16;
  }
  w.mmapped = mode == WeightLoadMode::kMmap;
  w.prefix = prefix;
  if (w.mmapped) {
    // Keep the files (and their mappings) alive as long as the views.
    auto keep = std::make_shared<SafetensorsSet>(std::move(set));
    w.storage = std::shared_ptr<void>(storage.get(), [storage, keep](void*) {});
  } else {
    w.storage = std::move(storage);
  }
  return w;
}

}  // namespace gk
