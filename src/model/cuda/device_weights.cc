#include "model/cuda/device_weights.h"

#include <cmath>

#include "kernels/cuda/decoder_ops.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/row_ops.h"
#include "util/format_bytes.h"

namespace gk {
namespace {

using cuda::Check;
using cuda::DeviceBuffer;
using cuda::DeviceMatrix;

constexpr uint64_t kAlign = 256;
uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// a's rows then b's as one matrix, where b's begin right after a's end; else an empty one.
DeviceMatrix Adjoining(const DeviceMatrix& a, const DeviceMatrix& b) {
  if (a.empty() || b.empty() || a.dtype != b.dtype || a.cols != b.cols) return {};
  const auto* a_end = static_cast<const std::byte*>(a.data) + a.rows * a.cols * int64_t(DTypeSize(a.dtype));
  if (b.data != a_end) return {};
  return {a.dtype, a.rows + b.rows, a.cols, a.data};
}

}  // namespace

Result<DeviceWeights> UploadWeights(const ModelConfig& c, const ModelWeights& w, uint64_t random_seed,
                                    const std::string& device_name, cudaStream_t stream) {
  DeviceWeights out;
  struct Piece {
    const void* host;  // null: random values (CreateRandom)
    uint64_t bytes;
    uint64_t offset;
    const MatrixView* matrix;
  };
  std::vector<Piece> pieces;
  uint64_t total = 0;
  auto add = [&](const void* host, uint64_t bytes, const MatrixView* m) {
    pieces.push_back({host, bytes, total, m});
    total += AlignUp(bytes);
    return pieces.size() - 1;
  };
  auto add_matrix = [&](const MatrixView& m) -> int64_t {
    return m.rows == 0 ? -1 : int64_t(add(m.data, uint64_t(m.bytes()), &m));
  };
  auto add_vector = [&](const std::vector<float>& v) -> int64_t {
    return v.empty() ? -1 : int64_t(add(v.data(), v.size() * sizeof(float), nullptr));
  };
  struct LayerPieces {
    int64_t mats[10], vecs[11];
    std::vector<int64_t> gate_up, down;  // per expert
  };
  // The router's RMSNorm weight, router.scale · D^-½ (GemmaModel::MoeBlock scales after the norm).
  std::vector<std::vector<float>> router_weights(w.layers.size());
  const float inv_sqrt_d = 1.f / std::sqrt(float(c.hidden_size));
  std::vector<LayerPieces> lp(w.layers.size());
  std::vector<int64_t> post_ffw_norm_2_piece;
  const int64_t embed_i = add_matrix(w.embed), ple_embed_i = add_matrix(w.ple_embed),
                ple_proj_i = add_matrix(w.ple_model_proj);
  const int64_t final_norm_i = add_vector(w.final_norm), ple_norm_i = add_vector(w.ple_proj_norm);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    for (float sc : L.router_scale) router_weights[l].push_back(sc * inv_sqrt_d);
    const MatrixView* mats[10] = {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.ple_gate, &L.ple_proj, &L.router};
    const std::vector<float>* vecs[11] = {&L.input_norm, &L.post_attn_norm, &L.pre_ffw_norm, &L.post_ffw_norm,
                                          &L.q_norm, &L.k_norm, &L.post_ple_norm, &router_weights[l],
                                          &L.per_expert_scale, &L.pre_ffw_norm_2, &L.post_ffw_norm_1};
    for (int i = 0; i < 10; ++i) lp[l].mats[i] = add_matrix(*mats[i]);
    for (int i = 0; i < 11; ++i) lp[l].vecs[i] = add_vector(*vecs[i]);
    post_ffw_norm_2_piece.push_back(add_vector(L.post_ffw_norm_2));
    for (const MatrixView& m : L.expert_gate_up) lp[l].gate_up.push_back(add_matrix(m));
    for (const MatrixView& m : L.expert_down) lp[l].down.push_back(add_matrix(m));
  }
  out.bytes = total;
  size_t free_bytes = 0, total_bytes = 0;
  GK_RETURN_IF_ERROR(Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  if (total > free_bytes) {
    return Status::Error(StrCat("the model's weights need ", GiBText(double(total)), " of GPU memory; ", device_name,
                                " has ", GiBText(double(free_bytes)), " free of ", GiBText(double(total_bytes))));
  }
  auto arena_or = DeviceBuffer<std::byte>::Allocate(size_t(total));
  if (!arena_or.ok()) {
    return Status::Error(StrCat("cannot allocate ", GiBText(double(total)), " of GPU memory for the weights on ", device_name,
                                ": ", arena_or.message()));
  }
  out.arena = std::move(*arena_or);
  std::byte* arena = out.arena.data();
  for (const Piece& p : pieces) {
    if (p.host == nullptr) {  // random: uniform with the variance of PyTorch's default Linear init
      const MatrixView& m = *p.matrix;
      GK_RETURN_IF_ERROR(cuda::FillRandom(arena + p.offset, m.dtype, m.rows * m.cols, 1.f / std::sqrt(float(m.cols)),
                                          random_seed + p.offset, stream));
      continue;
    }
    GK_RETURN_IF_ERROR(Check(cudaMemcpy(arena + p.offset, p.host, p.bytes, cudaMemcpyHostToDevice),
                             "copying the weights to the GPU"));
  }
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "writing the weights on the GPU"));
  // The copies above ran on the legacy stream, which `stream` (non-blocking) does not wait for.
  GK_RETURN_IF_ERROR(Check(cudaDeviceSynchronize(), "copying the weights to the GPU"));
  auto matrix = [&](int64_t i, const MatrixView& m) {
    DeviceMatrix d;
    if (i < 0) return d;  // an absent matrix (v of K=V layers, k/v of KV-shared ones): data stays null
    d.dtype = m.dtype;
    d.rows = m.rows;
    d.cols = m.cols;
    d.data = arena + pieces[size_t(i)].offset;
    return d;
  };
  auto vec = [&](int64_t i) -> const float* {
    return i < 0 ? nullptr : reinterpret_cast<const float*>(arena + pieces[size_t(i)].offset);
  };
  out.embed = matrix(embed_i, w.embed);
  out.ple_embed = matrix(ple_embed_i, w.ple_embed);
  out.ple_model_proj = matrix(ple_proj_i, w.ple_model_proj);
  out.final_norm = vec(final_norm_i);
  out.ple_proj_norm = vec(ple_norm_i);
  out.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    DeviceLayer& d = out.layers[l];
    const int64_t* m = lp[l].mats;
    d.q = matrix(m[0], L.q);
    d.k = matrix(m[1], L.k);
    d.v = matrix(m[2], L.v);
    d.o = matrix(m[3], L.o);
    d.gate = matrix(m[4], L.gate);
    d.up = matrix(m[5], L.up);
    d.down = matrix(m[6], L.down);
    d.gate_up = Adjoining(d.gate, d.up);
    d.qkv = d.v.empty() ? Adjoining(d.q, d.k) : Adjoining(Adjoining(d.q, d.k), d.v);
    d.ple_gate = matrix(m[7], L.ple_gate);
    d.ple_proj = matrix(m[8], L.ple_proj);
    const int64_t* v = lp[l].vecs;
    d.input_norm = vec(v[0]);
    d.post_attn_norm = vec(v[1]);
    d.pre_ffw_norm = vec(v[2]);
    d.post_ffw_norm = vec(v[3]);
    d.q_norm = vec(v[4]);
    d.k_norm = vec(v[5]);
    d.post_ple_norm = vec(v[6]);
    d.router = matrix(m[9], L.router);
    d.router_weight = vec(v[7]);
    d.per_expert_scale = vec(v[8]);
    d.pre_ffw_norm_2 = vec(v[9]);
    d.post_ffw_norm_1 = vec(v[10]);
    d.post_ffw_norm_2 = vec(post_ffw_norm_2_piece[l]);
    for (size_t e = 0; e < L.expert_gate_up.size(); ++e) {
      d.expert_gate_up.push_back(matrix(lp[l].gate_up[e], L.expert_gate_up[e]));
      d.expert_down.push_back(matrix(lp[l].down[e], L.expert_down[e]));
    }
    d.layer_scalar = L.layer_scalar;
  }
  return Result<DeviceWeights>(std::move(out));  // explicit: nvcc-safe, as DeviceBuffer's
}

Status PerLayerInputs(const ModelConfig& c, const DeviceWeights& w, cuda::GemmRunner& gemm, const float* x_emb,
                      const int32_t* tokens, int64_t T, float ple_embed_scale, float* ple, float* tok,
                      cudaStream_t stream) {
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  GK_RETURN_IF_ERROR(gemm.Run(w.ple_model_proj, x_emb, T, ple));
  GK_RETURN_IF_ERROR(cuda::ScaleRows(ple, T * LP, 1.f / std::sqrt(float(D)), stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(ple, w.ple_proj_norm, T * c.num_layers, P, c.rms_norm_eps, ple, stream));
  GK_RETURN_IF_ERROR(cuda::EmbedRows(w.ple_embed.data, w.ple_embed.dtype, w.ple_embed.rows, LP, tokens, T, ple_embed_scale,
                                     c.pad_token_id, tok, stream));
  return cuda::AddScale(ple, tok, T * LP, 1.f / std::sqrt(2.f), stream);
}

}  // namespace gk
