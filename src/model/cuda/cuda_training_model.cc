#include "model/cuda/cuda_training_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/attention_train.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/decoder_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/loss_head.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/cuda/train_ops.h"
#include "kernels/matmul.h"
#include "kernels/moe_routing.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/device_weights.h"
#include "model/decoder_constants.h"
#include "model/train/training_memory.h"
#include "util/format_bytes.h"

namespace gk {

using cuda::Check;
using cuda::DeviceBuffer;
using cuda::DeviceMatrix;

Status CheckCudaTrainingSupport(const ModelConfig&, const LoraAdapter* adapter) {
  if (adapter == nullptr) return Status::Error("the GPU trainer trains LoRA adapters; full fine-tuning runs on the CPU");
  return Status::Ok();
}

namespace {

// One LoRA module's factors and gradients on the device.
struct DeviceLora {
  LoraModule* host = nullptr;
  DeviceBuffer<float> a, b, grad_a, grad_b;  // (r, in), (out, r)
};

}  // namespace

struct CudaTrainingModel::Impl {
  ModelConfig c;
  CudaTrainingOptions opt;
  LoraAdapter* adapter = nullptr;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::GemmRunner> gemm;
  cuda::TrainAttention attention;
  cuda::LossHead head;

  DeviceWeights base;  // the frozen base: one allocation (model/cuda/device_weights.h)
  double planned_bytes = 0;  // plan's estimate of the run
  // Per layer and LoRA target: the module's index in `lora`, -1 where the projection has none.
  std::vector<std::array<int, kNumLoraTargets>> lora_index;
  uint64_t other_bytes = 0, activation_bytes = 0, peak_used = 0;
  float embed_scale = 1.f, ple_embed_scale = 1.f;
  std::vector<DeviceLora> lora;
  LayerRope rope;
  std::vector<int64_t> rope_offset;  // per RoPE slot: its table's offset in rope_table

  // The running micro-batch.
  int64_t T = 0, R = 0;
  std::vector<int32_t> h_ids, h_row_start, h_loss_rows, h_targets;
  std::vector<float> h_rope;
  DeviceBuffer<int32_t> ids, row_start, loss_rows, targets;
  DeviceBuffer<float> rope_table;

  // Activations of one layer (remat: every layer's are recomputed before its backward pass),
  // the layers' inputs, and the backward pass's gradients; sized for max_tokens.
  DeviceBuffer<float> inputs;  // (L + 1) × T × D
  DeviceBuffer<float> xn, q_raw, k_raw, v_raw, q, k, v, att, lse, o, x1, xn2, g, up, act, m, u;
  DeviceBuffer<float> dx, dxn, dd, dq, dk, dv, datt, df1, df2, df3, du, hrows, hn, dhn, ones;
  DeviceBuffer<float> drop, lora_dx;  // LoRA dropout: the dropped input, the masked gradient
  // KV sharing (E2B/E4B): per source layer, its K and V (after norms and RoPE) kept for the
  // layers that share them, and the gradients those layers send back; empty elsewhere.
  std::vector<DeviceBuffer<float>> shared_k, shared_v, shared_dk, shared_dv;
  // Per-layer embeddings (E2B/E4B): the inputs of every layer (T × L × P), and one layer's
  // slice of them, gate, gated input and projection; the backward pass's gradients.
  DeviceBuffer<float> ple, ple_tok, ple_l, ple_g, ple_a, ple_o, dple_a, dple_g, dple_up;
  // The MoE block (26B-A4B): one layer's expert inputs, gate|up, activations and outputs in slot
  // order (slots grouped by expert, kernels/moe_routing.h), its sum and the block's output; the
  // backward pass's gradients. The routing itself is the host's, from the GPU's router logits,
  // through the CPU's functions: both trainers choose the same experts.
  DeviceBuffer<float> xe, router_in, logits, slot_weight, xg, eg, ea, eo, y, mm;
  DeviceBuffer<int32_t> slot_token;
  DeviceBuffer<float> dm_moe, dy_moe, deo, dw, dact, dgu, dxg, dxe, dz, drouter;
  std::vector<float> h_probs, h_top_w, h_slot_weight, h_dw, h_dw_slot, h_dz;
  std::vector<int32_t> h_top, h_order, h_slot_token, h_idx;
  std::vector<int64_t> h_expert_begin;
  std::vector<std::vector<float>> h_expert_scale;  // per layer: per_expert_scale, for the host's routing
  bool dropout_on = false;
  uint64_t dropout_key = 0;

  ~Impl() {
    lora.clear();
    if (stream) cudaStreamDestroy(stream);
  }

  Status Allocate();
  Status Prepare(std::span<const TrainRowView> rows);
  Status Forward(int l, const float* x_in, float* x_out);
  Status Backward(int l, const float* x_in, float* dx_io);
  Status PleForward(int l, float* x);
  Status PleBackward(int l, float* dx);
  Status MoeForward(int l);
  Status MoeBackward(int l, const float* dmm, float* dx);
  // Expert e's slots: [begin, begin + count) of the slot order.
  int64_t ExpertBegin(int64_t e) const { return h_expert_begin[size_t(e)]; }
  int64_t ExpertCount(int64_t e) const { return h_expert_begin[size_t(e) + 1] - h_expert_begin[size_t(e)]; }
  // The K and V layer l attends over: its own, or its source layer's (KV sharing).
  float* AttentionK(int l) { return c.IsKvShared(l) ? shared_k[size_t(c.KvSourceLayer(l))].data() : k.data(); }
  float* AttentionV(int l) { return c.IsKvShared(l) ? shared_v[size_t(c.KvSourceLayer(l))].data() : v.data(); }
  Status Linear(int l, LoraTarget t, const DeviceMatrix& w, const float* x, float* y);
  // drop(x) for the LoRA of (layer, target): x itself without dropout, else into `drop`.
  Result<const float*> DropoutInput(int l, LoraTarget t, const float* x, int64_t in);
  uint64_t DropoutKey(int l, LoraTarget t) const { return MixKey(MixKey(dropout_key, uint64_t(l)), uint64_t(t)); }
  Status LinearBackward(int l, LoraTarget t, const DeviceMatrix& w, const float* x, const float* dy, float* dx,
                        bool accumulate);
  cuda::TrainAttentionArgs AttentionArgs(int l);
  // Each target's u = drop(x)·Aᵀ, 256-byte aligned (cuBLASLt's algorithms assume 16).
  int64_t UStride() const { return (opt.max_tokens * std::max(adapter->rank(), 1) + 63) / 64 * 64; }
  float* U(LoraTarget t) { return u.data() + int64_t(int(t)) * UStride(); }
  Status Run(std::span<const TrainRowView> rows, float loss_scale, bool backward, MicroBatchStats* stats);
};

Status CudaTrainingModel::Impl::Allocate() {
  const int64_t T = opt.max_tokens, D = c.hidden_size, N = c.num_heads, r = std::max(adapter->rank(), 1);
  int64_t H = 0, K = 0, F = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    H = std::max<int64_t>(H, c.HeadDim(l));
    K = std::max<int64_t>(K, c.KvHeads(l));
    F = std::max<int64_t>(F, c.MlpWidth(l));
  }
  const int64_t NH = N * H, KH = K * H;
  auto alloc = [&](DeviceBuffer<float>& b, int64_t n) -> Status {
    GK_ASSIGN_OR_RETURN(b, DeviceBuffer<float>::Allocate(size_t(std::max<int64_t>(n, 1))));
    other_bytes += uint64_t(std::max<int64_t>(n, 1)) * sizeof(float);
    return Status::Ok();
  };
  // What the backward pass reads: the layers' inputs and one layer's activations (remat).
  GK_RETURN_IF_ERROR(alloc(inputs, int64_t(c.num_layers + 1) * T * D));
  for (auto* b : {&xn, &o, &x1, &xn2, &m}) GK_RETURN_IF_ERROR(alloc(*b, T * D));
  for (auto* b : {&q_raw, &q, &att}) GK_RETURN_IF_ERROR(alloc(*b, T * NH));
  for (auto* b : {&k_raw, &v_raw, &k, &v}) GK_RETURN_IF_ERROR(alloc(*b, T * KH));
  for (auto* b : {&g, &up, &act}) GK_RETURN_IF_ERROR(alloc(*b, T * F));
  GK_RETURN_IF_ERROR(alloc(lse, N * T));
  GK_RETURN_IF_ERROR(alloc(u, int64_t(kNumLoraTargets) * UStride()));
  const int64_t P = c.hidden_size_per_layer_input;
  if (P > 0) {
    const int64_t LP = int64_t(c.num_layers) * P;
    GK_RETURN_IF_ERROR(alloc(ple, T * LP));
    GK_RETURN_IF_ERROR(alloc(ple_tok, T * LP));
    for (auto* b : {&ple_l, &ple_g, &ple_a}) GK_RETURN_IF_ERROR(alloc(*b, T * P));
    GK_RETURN_IF_ERROR(alloc(ple_o, T * D));
  }
  const int64_t E = c.num_experts, Fe = c.moe_intermediate_size, slots = T * c.top_k_experts;
  if (c.enable_moe_block) {
    for (auto* b : {&xe, &router_in, &y, &mm}) GK_RETURN_IF_ERROR(alloc(*b, T * D));
    GK_RETURN_IF_ERROR(alloc(logits, T * E));
    GK_RETURN_IF_ERROR(alloc(slot_weight, slots));
    for (auto* b : {&xg, &eo}) GK_RETURN_IF_ERROR(alloc(*b, slots * D));
    GK_RETURN_IF_ERROR(alloc(eg, slots * 2 * Fe));
    GK_RETURN_IF_ERROR(alloc(ea, slots * Fe));
    GK_ASSIGN_OR_RETURN(slot_token, DeviceBuffer<int32_t>::Allocate(size_t(slots)));
  }
  for (auto* v : {&shared_k, &shared_v, &shared_dk, &shared_dv}) v->resize(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsKvSource(l)) continue;
    const int64_t n = T * c.KvHeads(l) * c.HeadDim(l);
    GK_RETURN_IF_ERROR(alloc(shared_k[size_t(l)], n));
    GK_RETURN_IF_ERROR(alloc(shared_v[size_t(l)], n));
  }
  activation_bytes = other_bytes;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsKvSource(l)) continue;
    const int64_t n = T * c.KvHeads(l) * c.HeadDim(l);
    GK_RETURN_IF_ERROR(alloc(shared_dk[size_t(l)], n));
    GK_RETURN_IF_ERROR(alloc(shared_dv[size_t(l)], n));
  }
  if (P > 0) {
    for (auto* b : {&dple_a, &dple_g, &dple_up}) GK_RETURN_IF_ERROR(alloc(*b, T * P));
  }
  if (c.enable_moe_block) {
    for (auto* b : {&dm_moe, &dy_moe, &dxe, &drouter}) GK_RETURN_IF_ERROR(alloc(*b, T * D));
    for (auto* b : {&deo, &dxg}) GK_RETURN_IF_ERROR(alloc(*b, slots * D));
    GK_RETURN_IF_ERROR(alloc(dw, slots));
    GK_RETURN_IF_ERROR(alloc(dact, slots * Fe));
    GK_RETURN_IF_ERROR(alloc(dgu, slots * 2 * Fe));
    GK_RETURN_IF_ERROR(alloc(dz, T * E));
  }
  // The backward pass's gradients and the loss head's rows.
  for (auto* b : {&dx, &dxn, &dd, &hrows, &hn, &dhn}) GK_RETURN_IF_ERROR(alloc(*b, T * D));
  for (auto* b : {&dq, &datt}) GK_RETURN_IF_ERROR(alloc(*b, T * NH));
  for (auto* b : {&dk, &dv}) GK_RETURN_IF_ERROR(alloc(*b, T * KH));
  for (auto* b : {&df1, &df2, &df3}) GK_RETURN_IF_ERROR(alloc(*b, T * F));
  if (adapter->options().dropout > 0) {
    const int64_t widest = std::max({D, NH, F});
    GK_RETURN_IF_ERROR(alloc(drop, T * widest));
    GK_RETURN_IF_ERROR(alloc(lora_dx, T * widest));
  }
  GK_RETURN_IF_ERROR(alloc(du, T * r));
  GK_RETURN_IF_ERROR(alloc(ones, T));
  const std::vector<float> h_ones(static_cast<size_t>(T), 1.f);
  // On the model's stream (non-blocking: the legacy default stream would not order against it).
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(ones.data(), h_ones.data(), size_t(T) * sizeof(float), cudaMemcpyHostToDevice,
                                           stream), "cudaMemcpy"));
  int64_t rope_floats = 0;
  for (int H_slot : rope.head_dim) {
    rope_offset.push_back(rope_floats);
    rope_floats += T * H_slot;
  }
  GK_RETURN_IF_ERROR(alloc(rope_table, rope_floats));
  h_rope.resize(size_t(std::max<int64_t>(rope_floats, 1)));
  GK_ASSIGN_OR_RETURN(ids, DeviceBuffer<int32_t>::Allocate(size_t(T)));
  GK_ASSIGN_OR_RETURN(row_start, DeviceBuffer<int32_t>::Allocate(size_t(T)));
  GK_ASSIGN_OR_RETURN(loss_rows, DeviceBuffer<int32_t>::Allocate(size_t(T)));
  GK_ASSIGN_OR_RETURN(targets, DeviceBuffer<int32_t>::Allocate(size_t(T)));
  // The adapter's factors and gradients.
  lora_index.assign(size_t(c.num_layers), {});
  for (auto& row : lora_index) row.fill(-1);
  for (LoraModule& mod : adapter->modules()) {
    DeviceLora d;
    d.host = &mod;
    GK_ASSIGN_OR_RETURN(d.a, DeviceBuffer<float>::Allocate(mod.a.size()));
    GK_ASSIGN_OR_RETURN(d.b, DeviceBuffer<float>::Allocate(mod.b.size()));
    GK_ASSIGN_OR_RETURN(d.grad_a, DeviceBuffer<float>::Allocate(mod.a.size()));
    GK_ASSIGN_OR_RETURN(d.grad_b, DeviceBuffer<float>::Allocate(mod.b.size()));
    other_bytes += 2 * (mod.a.size() + mod.b.size()) * sizeof(float);
    GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(d.grad_a.data(), 0, mod.a.size() * sizeof(float), stream), "cudaMemset"));
    GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(d.grad_b.data(), 0, mod.b.size() * sizeof(float), stream), "cudaMemset"));
    lora_index[size_t(mod.layer)][int(mod.target)] = int(lora.size());
    lora.push_back(std::move(d));
  }
  return Status::Ok();
}

// The micro-batch: ids, each token's row start, the target rows (a token whose next one in its
// row is a target) and RoPE's angles at each token's position in its row.
Status CudaTrainingModel::Impl::Prepare(std::span<const TrainRowView> rows) {
  h_ids.clear();
  h_row_start.clear();
  h_loss_rows.clear();
  h_targets.clear();
  std::vector<int64_t> pos;
  for (const TrainRowView& r : rows) {
    if (r.tokens.empty()) return Status::Error("training: empty row");
    if (r.loss_mask.size() != r.tokens.size()) {
      return Status::Error(StrCat("training: loss mask has ", r.loss_mask.size(), " entries for ", r.tokens.size(), " tokens"));
    }
    const int32_t first = int32_t(h_ids.size());
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      const int32_t id = r.tokens[i];
      if (id < 0 || id >= c.vocab_size) {
        return Status::Error(StrCat("training: token id ", id, " outside the vocabulary (", c.vocab_size, ")"));
      }
      if (i + 1 < r.tokens.size() && r.loss_mask[i + 1]) {
        h_loss_rows.push_back(int32_t(h_ids.size()));
        h_targets.push_back(r.tokens[i + 1]);
      }
      h_ids.push_back(id);
      h_row_start.push_back(first);
      pos.push_back(int64_t(i));
    }
  }
  T = int64_t(h_ids.size());
  R = int64_t(h_loss_rows.size());
  if (T == 0) return Status::Error("training: empty micro-batch");
  if (T > opt.max_tokens) return Status::Error(StrCat("training: micro-batch of ", T, " tokens exceeds max_tokens ", opt.max_tokens));
  auto up = [&](DeviceBuffer<int32_t>& d, const std::vector<int32_t>& h) {
    return Check(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                 "copying the micro-batch to the GPU");
  };
  GK_RETURN_IF_ERROR(up(ids, h_ids));
  GK_RETURN_IF_ERROR(up(row_start, h_row_start));
  if (R > 0) {
    GK_RETURN_IF_ERROR(up(loss_rows, h_loss_rows));
    GK_RETURN_IF_ERROR(up(targets, h_targets));
  }
  for (size_t s = 0; s < rope.head_dim.size(); ++s) {
    const int64_t H = rope.head_dim[s];
    float* table = h_rope.data() + rope_offset[s];
    for (int64_t t = 0; t < T; ++t) RopeCosSin(rope.inv_freq[s].data(), H / 2, pos[size_t(t)], table + t * H);
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(rope_table.data() + rope_offset[s], table, size_t(T * H) * sizeof(float),
                                             cudaMemcpyHostToDevice, stream), "copying RoPE angles to the GPU"));
  }
  // Synchronous: the host vectors are reused by the next micro-batch.
  return Check(cudaStreamSynchronize(stream), "copying the micro-batch to the GPU");
}

Result<const float*> CudaTrainingModel::Impl::DropoutInput(int l, LoraTarget t, const float* x, int64_t in) {
  if (!dropout_on) return x;
  GK_RETURN_IF_ERROR(cuda::LoraDropout(x, T * in, DropoutKey(l, t), float(adapter->options().dropout), drop.data(), stream));
  return static_cast<const float*>(drop.data());
}

// y = x·Wᵀ + s·(drop(x)·Aᵀ)·Bᵀ, keeping u = drop(x)·Aᵀ for the backward pass.
Status CudaTrainingModel::Impl::Linear(int l, LoraTarget t, const DeviceMatrix& w, const float* x, float* y) {
  GK_RETURN_IF_ERROR(gemm->Run(w, x, T, y));
  const int i = lora_index[size_t(l)][int(t)];
  if (i < 0) return Status::Ok();
  const DeviceLora& d = lora[size_t(i)];
  const int64_t r = adapter->rank(), in = d.host->in, out = d.host->out;
  GK_ASSIGN_OR_RETURN(const float* xd, DropoutInput(l, t, x, in));
  GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, T, r, in, xd, in, false, d.a.data(), in, false, U(t), r, 1.f, 0.f));
  return cuda::F32Product(*gemm, T, out, r, U(t), r, false, d.b.data(), r, false, y, out, adapter->scaling(), 1.f);
}

// dx (+)= dy·W + du·A with du = s·dy·B; dB += s·dyᵀ·u and dA += duᵀ·x (TrainingModel::LinearBackward).
Status CudaTrainingModel::Impl::LinearBackward(int l, LoraTarget t, const DeviceMatrix& w, const float* x, const float* dy,
                                               float* dx_out, bool accumulate) {
  GK_RETURN_IF_ERROR(gemm->RunInputGrad(w, dy, T, dx_out, accumulate));
  const int i = lora_index[size_t(l)][int(t)];
  if (i < 0) return Status::Ok();
  DeviceLora& d = lora[size_t(i)];
  const int64_t r = adapter->rank(), in = d.host->in, out = d.host->out;
  const float s = adapter->scaling();
  GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, out, r, T, dy, out, true, U(t), r, true, d.grad_b.data(), r, s, 1.f));
  GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, T, r, out, dy, out, false, d.b.data(), r, true, du.data(), r, s, 0.f));
  GK_ASSIGN_OR_RETURN(const float* xd, DropoutInput(l, t, x, in));  // the mask again, from its key
  GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, r, in, T, du.data(), r, true, xd, in, true, d.grad_a.data(), in, 1.f, 1.f));
  if (!dropout_on) return cuda::F32Product(*gemm, T, in, r, du.data(), r, false, d.a.data(), in, true, dx_out, in, 1.f, 1.f);
  GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, T, in, r, du.data(), r, false, d.a.data(), in, true, lora_dx.data(), in, 1.f, 0.f));
  return cuda::LoraDropoutBackwardAdd(lora_dx.data(), T * in, DropoutKey(l, t), float(adapter->options().dropout),
                                      dx_out, stream);
}

cuda::TrainAttentionArgs CudaTrainingModel::Impl::AttentionArgs(int l) {
  cuda::TrainAttentionArgs a;
  a.T = T;
  a.row_start = row_start.data();
  a.host_row_start = h_row_start;
  a.num_heads = c.num_heads;
  a.kv_heads = c.KvHeads(l);
  a.head_dim = c.HeadDim(l);
  a.scale = AttentionScale(c);
  a.window = c.IsFull(l) ? 0 : c.sliding_window;
  a.dtype = DType::kF32;  // in either precision, as TrainingModel's attention
  a.q = q.data();
  a.k = AttentionK(l);
  a.v = AttentionV(l);
  a.out = att.data();
  a.lse = lse.data();
  return a;
}

// TrainingModel::LayerForward on the device (dense layers): x_out from x_in, this layer's
// activations left in the buffers for Backward.
Status CudaTrainingModel::Impl::Forward(int l, const float* x_in, float* x_out) {
  const DeviceLayer& L = base.layers[size_t(l)];
  const int64_t D = c.hidden_size, N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
  const float eps = c.rms_norm_eps;
  const float* cos_sin = rope_table.data() + rope_offset[size_t(rope.slot[size_t(l)])];
  const size_t kv_bytes = size_t(T * K * H) * sizeof(float);
  const bool own_kv = !c.IsKvShared(l);  // a KV-shared layer projects only Q
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(x_in, L.input_norm, T, D, eps, xn.data(), stream));
  GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kQ, L.q, xn.data(), q_raw.data()));
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(q_raw.data(), L.q_norm, T * N, H, eps, q.data(), stream));
  GK_RETURN_IF_ERROR(cuda::RopeRows(q.data(), T, N, H, cos_sin, stream));
  if (own_kv) {
    GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kK, L.k, xn.data(), k_raw.data()));
    if (c.KEqV(l)) {  // V is the raw K projection (LoRA included), before k_norm and RoPE
      GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(v_raw.data(), k_raw.data(), kv_bytes, cudaMemcpyDeviceToDevice, stream),
                               "copying K to V"));
    } else {
      GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kV, L.v, xn.data(), v_raw.data()));
    }
    GK_RETURN_IF_ERROR(cuda::RmsNormRows(k_raw.data(), L.k_norm, T * K, H, eps, k.data(), stream));
    GK_RETURN_IF_ERROR(cuda::RopeRows(k.data(), T, K, H, cos_sin, stream));
    if (c.arch == Arch::kGemma4) {
      GK_RETURN_IF_ERROR(cuda::RmsNormRows(v_raw.data(), nullptr, T * K, H, eps, v.data(), stream));
    } else {
      GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(v.data(), v_raw.data(), kv_bytes, cudaMemcpyDeviceToDevice, stream),
                               "copying V"));
    }
  }
  if (c.IsKvSource(l)) {  // kept for the shared layers (a remat recompute rewrites k and v)
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(shared_k[size_t(l)].data(), k.data(), kv_bytes, cudaMemcpyDeviceToDevice, stream),
                             "keeping K for the shared layers"));
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(shared_v[size_t(l)].data(), v.data(), kv_bytes, cudaMemcpyDeviceToDevice, stream),
                             "keeping V for the shared layers"));
  }
  GK_RETURN_IF_ERROR(attention.Forward(AttentionArgs(l), *gemm, stream));
  GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kO, L.o, att.data(), o.data()));
  // x1 = x_in + RmsNorm(o); x2 = x1 + RmsNorm(down(gelu(gate)·up)); x_out = x2 · layer_scalar.
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(x1.data(), x_in, size_t(T * D) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                           "copying the residual"));
  GK_RETURN_IF_ERROR(cuda::RmsNormAddRows(o.data(), L.post_attn_norm, T, D, eps, x1.data(), stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(x1.data(), L.pre_ffw_norm, T, D, eps, xn2.data(), stream));
  GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kGate, L.gate, xn2.data(), g.data()));
  GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kUp, L.up, xn2.data(), up.data()));
  GK_RETURN_IF_ERROR(cuda::GeluTanhMul(g.data(), up.data(), T * F, act.data(), stream));
  GK_RETURN_IF_ERROR(Linear(l, LoraTarget::kDown, L.down, act.data(), m.data()));
  if (c.enable_moe_block) GK_RETURN_IF_ERROR(MoeForward(l));  // mm = RmsNorm(m) + RmsNorm(experts)
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(x_out, x1.data(), size_t(T * D) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                           "copying the residual"));
  GK_RETURN_IF_ERROR(cuda::RmsNormAddRows(c.enable_moe_block ? mm.data() : m.data(), L.post_ffw_norm, T, D, eps, x_out, stream));
  if (c.hidden_size_per_layer_input > 0) GK_RETURN_IF_ERROR(PleForward(l, x_out));
  if (L.layer_scalar != 1.f) GK_RETURN_IF_ERROR(cuda::ScaleRows(x_out, T * D, L.layer_scalar, stream));
  return Status::Ok();
}

// x += RMSNorm(W_proj(gelu_tanh(W_gate x) · ple[:, l, :]); post_ple_norm) (TrainingModel::PleForward),
// keeping the gate, the layer's slice of the inputs and the projection for PleBackward.
Status CudaTrainingModel::Impl::PleForward(int l, float* x) {
  const DeviceLayer& L = base.layers[size_t(l)];
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  GK_RETURN_IF_ERROR(Check(cudaMemcpy2DAsync(ple_l.data(), size_t(P) * sizeof(float), ple.data() + int64_t(l) * P,
                                             size_t(LP) * sizeof(float), size_t(P) * sizeof(float), size_t(T),
                                             cudaMemcpyDeviceToDevice, stream), "slicing the per-layer inputs"));
  GK_RETURN_IF_ERROR(gemm->Run(L.ple_gate, x, T, ple_g.data()));
  GK_RETURN_IF_ERROR(cuda::GeluTanhMul(ple_g.data(), ple_l.data(), T * P, ple_a.data(), stream));
  GK_RETURN_IF_ERROR(gemm->Run(L.ple_proj, ple_a.data(), T, ple_o.data()));
  return cuda::RmsNormAddRows(ple_o.data(), L.post_ple_norm, T, D, c.rms_norm_eps, x, stream);
}

// dx: the gradient of PleForward's output on entry, of its input on return (the weights are
// frozen: TrainingModel::PleBackward without the weight gradients).
Status CudaTrainingModel::Impl::PleBackward(int l, float* dx) {
  const DeviceLayer& L = base.layers[size_t(l)];
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input;
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(ple_o.data(), L.post_ple_norm, T, D, c.rms_norm_eps, dx, dd.data(), false,
                                               stream));
  GK_RETURN_IF_ERROR(gemm->RunInputGrad(L.ple_proj, dd.data(), T, dple_a.data(), false));
  GK_RETURN_IF_ERROR(cuda::GeluTanhMulBackward(ple_g.data(), ple_l.data(), dple_a.data(), T * P, dple_g.data(),
                                               dple_up.data(), stream));
  return gemm->RunInputGrad(L.ple_gate, dple_g.data(), T, dx, true);
}

// mm = RMSNorm(m; post_ffw_norm_1) + RMSNorm(y; post_ffw_norm_2), y = Σ_j w_j · expert_j(xe),
// xe = RMSNorm(x1; pre_ffw_norm_2) (TrainingModel::MoeForward). The router's logits come to
// the host, which routes each token as the CPU does and groups the slots by expert; the
// experts then run on their slots' rows, grouped.
Status CudaTrainingModel::Impl::MoeForward(int l) {
  const DeviceLayer& L = base.layers[size_t(l)];
  const int64_t D = c.hidden_size, E = c.num_experts, Fe = c.moe_intermediate_size, k = c.top_k_experts, n = T * k;
  const float eps = c.rms_norm_eps;
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(x1.data(), L.pre_ffw_norm_2, T, D, eps, xe.data(), stream));
  // The router's input RmsNorm_noscale(x1) · router.scale · D^-½ (router_weight holds the product).
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(x1.data(), L.router_weight, T, D, eps, router_in.data(), stream));
  {
    // f32-accurate in either precision, as TrainingModel's router (WeightMatMul): a rounding must
    // not flip which experts a token takes.
    ScopedBf16Activations f32_accurate(Bf16Activations::kSplit);
    GK_RETURN_IF_ERROR(gemm->Run(L.router, router_in.data(), T, logits.data()));
  }
  h_probs.resize(size_t(T * E));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_probs.data(), logits.data(), h_probs.size() * sizeof(float),
                                           cudaMemcpyDeviceToHost, stream), "copying the router's logits"));
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the router's logits"));
  h_top.resize(size_t(n));
  h_top_w.resize(size_t(n));
  h_idx.resize(size_t(E));
  for (int64_t t = 0; t < T; ++t) {
    RouteToken(h_probs.data() + t * E, E, k, h_expert_scale[size_t(l)].data(), h_top.data() + t * k,
               h_top_w.data() + t * k, h_idx.data());
  }
  h_expert_begin.resize(size_t(E) + 1);
  h_order.resize(size_t(n));
  GroupSlotsByExpert(h_top.data(), n, E, h_expert_begin.data(), h_order.data());
  h_slot_token.resize(size_t(n));
  h_slot_weight.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    h_slot_token[size_t(i)] = h_order[size_t(i)] / int32_t(k);
    h_slot_weight[size_t(i)] = h_top_w[size_t(h_order[size_t(i)])];
  }
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(slot_token.data(), h_slot_token.data(), size_t(n) * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, stream), "copying the routing to the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(slot_weight.data(), h_slot_weight.data(), size_t(n) * sizeof(float),
                                           cudaMemcpyHostToDevice, stream), "copying the routing to the GPU"));
  GK_RETURN_IF_ERROR(cuda::GatherRows(xe.data(), D, slot_token.data(), n, xg.data(), stream));
  for (int64_t e = 0; e < E; ++e) {
    if (ExpertCount(e) == 0) continue;
    GK_RETURN_IF_ERROR(gemm->Run(L.expert_gate_up[size_t(e)], xg.data() + ExpertBegin(e) * D, ExpertCount(e),
                                 eg.data() + ExpertBegin(e) * 2 * Fe));
  }
  GK_RETURN_IF_ERROR(cuda::GeluTanhMulRows(eg.data(), 2 * Fe, eg.data() + Fe, 2 * Fe, n, Fe, ea.data(), Fe, stream));
  GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(y.data(), 0, size_t(T * D) * sizeof(float), stream), "cudaMemset"));
  for (int64_t e = 0; e < E; ++e) {
    if (ExpertCount(e) == 0) continue;
    const int64_t i0 = ExpertBegin(e);
    GK_RETURN_IF_ERROR(gemm->Run(L.expert_down[size_t(e)], ea.data() + i0 * Fe, ExpertCount(e), eo.data() + i0 * D));
    // An expert's slots are distinct tokens: no two rows of one call meet.
    GK_RETURN_IF_ERROR(cuda::ScatterAddRows(eo.data() + i0 * D, D, slot_token.data() + i0, slot_weight.data() + i0,
                                            ExpertCount(e), y.data(), stream));
  }
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(m.data(), L.post_ffw_norm_1, T, D, eps, mm.data(), stream));
  return cuda::RmsNormAddRows(y.data(), L.post_ffw_norm_2, T, D, eps, mm.data(), stream);
}

// dmm: the gradient of mm. Writes dm_moe (the dense MLP output's gradient) and adds the
// experts' and the router's gradients of x1 to dx (TrainingModel::MoeBackward without the
// frozen weights' gradients). The routing weights' gradients go through the host's
// RouteTokenBackward to the router's logits.
Status CudaTrainingModel::Impl::MoeBackward(int l, const float* dmm, float* dx) {
  const DeviceLayer& L = base.layers[size_t(l)];
  const int64_t D = c.hidden_size, E = c.num_experts, Fe = c.moe_intermediate_size, k = c.top_k_experts, n = T * k;
  const float eps = c.rms_norm_eps;
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(m.data(), L.post_ffw_norm_1, T, D, eps, dmm, dm_moe.data(), false, stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(y.data(), L.post_ffw_norm_2, T, D, eps, dmm, dy_moe.data(), false, stream));
  // y = Σ_j w_j · eo_j: deo_j = w_j · dy, dw_j = dy · eo_j.
  GK_RETURN_IF_ERROR(cuda::MoeSlotBackward(dy_moe.data(), D, slot_token.data(), slot_weight.data(), eo.data(), n,
                                           deo.data(), dw.data(), stream));
  // Through each expert: eo = down · act, act = gelu(gate) · up, gate|up = gate_up · xe.
  for (int64_t e = 0; e < E; ++e) {
    if (ExpertCount(e) == 0) continue;
    const int64_t i0 = ExpertBegin(e);
    GK_RETURN_IF_ERROR(gemm->RunInputGrad(L.expert_down[size_t(e)], deo.data() + i0 * D, ExpertCount(e),
                                          dact.data() + i0 * Fe, false));
  }
  GK_RETURN_IF_ERROR(cuda::GeluTanhMulBackwardRows(eg.data(), eg.data() + Fe, 2 * Fe, dact.data(), Fe, n, Fe, dgu.data(),
                                                   dgu.data() + Fe, 2 * Fe, stream));
  GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(dxe.data(), 0, size_t(T * D) * sizeof(float), stream), "cudaMemset"));
  for (int64_t e = 0; e < E; ++e) {
    if (ExpertCount(e) == 0) continue;
    const int64_t i0 = ExpertBegin(e);
    GK_RETURN_IF_ERROR(gemm->RunInputGrad(L.expert_gate_up[size_t(e)], dgu.data() + i0 * 2 * Fe, ExpertCount(e),
                                          dxg.data() + i0 * D, false));
    GK_RETURN_IF_ERROR(cuda::ScatterAddRows(dxg.data() + i0 * D, D, slot_token.data() + i0, ones.data(), ExpertCount(e),
                                            dxe.data(), stream));
  }
  // The routing weights' gradients, back in (token, choice) order, through the routing on the host.
  h_dw.resize(size_t(n));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_dw.data(), dw.data(), size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream),
                           "copying the routing gradients"));
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the routing gradients"));
  h_dw_slot.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) h_dw_slot[size_t(h_order[size_t(i)])] = h_dw[size_t(i)];
  h_dz.resize(size_t(T * E));
  for (int64_t t = 0; t < T; ++t) {
    RouteTokenBackward(h_probs.data() + t * E, E, k, h_top.data() + t * k, h_top_w.data() + t * k,
                       h_dw_slot.data() + t * k, h_expert_scale[size_t(l)].data(), h_dz.data() + t * E);
  }
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(dz.data(), h_dz.data(), h_dz.size() * sizeof(float), cudaMemcpyHostToDevice,
                                           stream), "copying the router's gradient to the GPU"));
  {
    ScopedBf16Activations f32_accurate(Bf16Activations::kSplit);  // as the router's forward product
    GK_RETURN_IF_ERROR(gemm->RunInputGrad(L.router, dz.data(), T, drouter.data(), false));
  }
  // The router's input r = RmsNorm_noscale(x1) · router_weight, and xe = RmsNorm(x1; pre_ffw_norm_2).
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(x1.data(), L.router_weight, T, D, eps, drouter.data(), dx, true, stream));
  return cuda::RmsNormBackwardRows(x1.data(), L.pre_ffw_norm_2, T, D, eps, dxe.data(), dx, true, stream);
}

// TrainingModel::LayerBackward on the device: dx_io is the gradient of the layer's output on
// entry, of its input on return; the layer's activations are Forward's (just recomputed).
Status CudaTrainingModel::Impl::Backward(int l, const float* x_in, float* dx_io) {
  const DeviceLayer& L = base.layers[size_t(l)];
  const int64_t D = c.hidden_size, N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
  const float eps = c.rms_norm_eps;
  const float* cos_sin = rope_table.data() + rope_offset[size_t(rope.slot[size_t(l)])];
  const bool own_kv = !c.IsKvShared(l);
  if (L.layer_scalar != 1.f) GK_RETURN_IF_ERROR(cuda::ScaleRows(dx_io, T * D, L.layer_scalar, stream));
  if (c.hidden_size_per_layer_input > 0) GK_RETURN_IF_ERROR(PleBackward(l, dx_io));  // now the gradient of x2
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(c.enable_moe_block ? mm.data() : m.data(), L.post_ffw_norm, T, D, eps, dx_io,
                                               dd.data(), false, stream));
  const float* dm = dd.data();
  if (c.enable_moe_block) {  // dd is the gradient of mm; the experts and the router add theirs to dx (x1's)
    GK_RETURN_IF_ERROR(MoeBackward(l, dd.data(), dx_io));
    dm = dm_moe.data();
  }
  GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kDown, L.down, act.data(), dm, df1.data(), false));
  GK_RETURN_IF_ERROR(cuda::GeluTanhMulBackward(g.data(), up.data(), df1.data(), T * F, df2.data(), df3.data(), stream));
  GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kGate, L.gate, xn2.data(), df2.data(), dxn.data(), false));
  GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kUp, L.up, xn2.data(), df3.data(), dxn.data(), true));
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(x1.data(), L.pre_ffw_norm, T, D, eps, dxn.data(), dx_io, true, stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(o.data(), L.post_attn_norm, T, D, eps, dx_io, dd.data(), false, stream));
  GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kO, L.o, att.data(), dd.data(), datt.data(), false));
  GK_RETURN_IF_ERROR(attention.Backward(AttentionArgs(l), datt.data(), dq.data(), dk.data(), dv.data(), *gemm, stream));
  const int64_t kv = T * K * H;
  if (!own_kv) {  // the K/V belong to the source layer, whose backward pass comes later
    const size_t src = size_t(c.KvSourceLayer(l));
    GK_RETURN_IF_ERROR(cuda::AddScale(shared_dk[src].data(), dk.data(), kv, 1.f, stream));
    GK_RETURN_IF_ERROR(cuda::AddScale(shared_dv[src].data(), dv.data(), kv, 1.f, stream));
  } else if (c.IsKvSource(l)) {  // what the shared layers sent back
    GK_RETURN_IF_ERROR(cuda::AddScale(dk.data(), shared_dk[size_t(l)].data(), kv, 1.f, stream));
    GK_RETURN_IF_ERROR(cuda::AddScale(dv.data(), shared_dv[size_t(l)].data(), kv, 1.f, stream));
  }
  GK_RETURN_IF_ERROR(cuda::RopeRows(dq.data(), T, N, H, cos_sin, stream, /*inverse=*/true));
  GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(q_raw.data(), L.q_norm, T * N, H, eps, dq.data(), dq.data(), false, stream));
  GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kQ, L.q, xn.data(), dq.data(), dxn.data(), false));
  if (own_kv) {
    GK_RETURN_IF_ERROR(cuda::RopeRows(dk.data(), T, K, H, cos_sin, stream, /*inverse=*/true));
    GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(k_raw.data(), L.k_norm, T * K, H, eps, dk.data(), dk.data(), false, stream));
    if (c.arch == Arch::kGemma4) {
      GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(v_raw.data(), nullptr, T * K, H, eps, dv.data(), dv.data(), false, stream));
    }
    if (c.KEqV(l)) {  // V was the raw K projection: its gradient joins K's
      GK_RETURN_IF_ERROR(cuda::AddScale(dk.data(), dv.data(), kv, 1.f, stream));
    }
    GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kK, L.k, xn.data(), dk.data(), dxn.data(), true));
    if (!c.KEqV(l)) GK_RETURN_IF_ERROR(LinearBackward(l, LoraTarget::kV, L.v, xn.data(), dv.data(), dxn.data(), true));
  }
  return cuda::RmsNormBackwardRows(x_in, L.input_norm, T, D, eps, dxn.data(), dx_io, true, stream);
}

// One micro-batch: embed, every layer forward (keeping its input), the loss head over the
// target rows, then (backward) every layer recomputed and run backward, last to first.
Status CudaTrainingModel::Impl::Run(std::span<const TrainRowView> rows, float loss_scale, bool backward,
                                    MicroBatchStats* stats) {
  GK_RETURN_IF_ERROR(Check(cudaSetDevice(opt.device), "cudaSetDevice"));
  GK_RETURN_IF_ERROR(Prepare(rows));
  const int64_t D = c.hidden_size, Lc = c.num_layers;
  auto input = [&](int64_t l) { return inputs.data() + l * T * D; };
  GK_RETURN_IF_ERROR(cuda::EmbedRows(base.embed.data, base.embed.dtype, base.embed.rows, D, ids.data(), T, embed_scale, -1, input(0), stream));
  if (c.hidden_size_per_layer_input > 0) {
    GK_RETURN_IF_ERROR(PerLayerInputs(c, base, *gemm, input(0), ids.data(), T, ple_embed_scale, ple.data(), ple_tok.data(),
                                      stream));
  }
  for (auto* grads : {&shared_dk, &shared_dv}) {
    for (DeviceBuffer<float>& g : *grads) {
      if (g.size() > 0) GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(g.data(), 0, g.size() * sizeof(float), stream), "cudaMemset"));
    }
  }
  for (int l = 0; l < Lc; ++l) GK_RETURN_IF_ERROR(Forward(l, input(l), input(l + 1)));
  MicroBatchStats mb;
  mb.tokens = T;
  mb.targets = R;
  if (R > 0) {
    GK_RETURN_IF_ERROR(cuda::GatherRows(input(Lc), D, loss_rows.data(), R, hrows.data(), stream));
    GK_RETURN_IF_ERROR(cuda::RmsNormRows(hrows.data(), base.final_norm, R, D, c.rms_norm_eps, hn.data(), stream));
    cuda::LossHeadArgs la;
    la.h = hn.data();
    la.R = R;
    la.embed = base.embed;
    la.targets = targets.data();
    la.cap = c.final_logit_softcap;
    la.scale = loss_scale;
    la.dh = backward ? dhn.data() : nullptr;
    GK_ASSIGN_OR_RETURN(const cuda::LossHeadResult loss, head.Run(la, *gemm, stream));
    mb.loss_sum = loss.loss_sum;
    mb.correct = loss.correct;
  }
  if (backward) {
    // dx of the last layer's output: the target rows' gradient through the final norm, zero elsewhere.
    GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(dx.data(), 0, size_t(T * D) * sizeof(float), stream), "cudaMemset"));
    if (R > 0) {
      GK_RETURN_IF_ERROR(cuda::RmsNormBackwardRows(hrows.data(), base.final_norm, R, D, c.rms_norm_eps, dhn.data(), dd.data(),
                                                   false, stream));
      GK_RETURN_IF_ERROR(cuda::ScatterAddRows(dd.data(), D, loss_rows.data(), ones.data(), R, dx.data(), stream));
    }
    for (int l = Lc - 1; l >= 0; --l) {
      GK_RETURN_IF_ERROR(Forward(l, input(l), input(l + 1)));  // remat: this layer's activations again
      GK_RETURN_IF_ERROR(Backward(l, input(l), dx.data()));
    }
  }
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the training step on the GPU"));
  size_t free_bytes = 0, total_bytes = 0;
  GK_RETURN_IF_ERROR(Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  peak_used = std::max<uint64_t>(peak_used, total_bytes - free_bytes);
  if (stats != nullptr) {
    stats->loss_sum += mb.loss_sum;
    stats->targets += mb.targets;
    stats->correct += mb.correct;
    stats->tokens += mb.tokens;
  }
  return Status::Ok();
}

CudaTrainingModel::CudaTrainingModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaTrainingModel::~CudaTrainingModel() = default;

Result<std::unique_ptr<CudaTrainingModel>> CudaTrainingModel::Create(const ModelConfig& config, const ModelWeights& weights,
                                                                   LoraAdapter* adapter, const CudaTrainingOptions& options) {
  return Make(config, weights, adapter, options, 0);
}

Result<std::unique_ptr<CudaTrainingModel>> CudaTrainingModel::CreateRandom(const ModelConfig& config, DType dtype,
                                                                         uint64_t seed, LoraAdapter* adapter,
                                                                         const CudaTrainingOptions& options) {
  if (dtype != DType::kBF16 && dtype != DType::kF32) {
    return Status::Error(StrCat("random GPU weights are bf16 or f32, not ", DTypeName(dtype)));
  }
  GK_RETURN_IF_ERROR(ValidateModelConfig(config));
  return Make(config, WeightShapes(config, dtype), adapter, options, seed | 1);
}

Result<std::unique_ptr<CudaTrainingModel>> CudaTrainingModel::Make(const ModelConfig& config, const ModelWeights& weights,
                                                                 LoraAdapter* adapter, const CudaTrainingOptions& options,
                                                                 uint64_t random_seed) {
  GK_RETURN_IF_ERROR(CheckCudaTrainingSupport(config, adapter));
  GK_RETURN_IF_ERROR(CheckCudaSupport(config, weights));
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.c = config;
  m.opt = options;
  m.opt.max_tokens = std::max<int64_t>(2, options.max_tokens);
  m.adapter = adapter;
  GK_RETURN_IF_ERROR(Check(cudaSetDevice(options.device), "cudaSetDevice"));
  {
    // Refused before anything is allocated when gemmakit plan's estimate of the run exceeds what
    // the device has free (a run that cannot fit stops here, not at step 1 or later).
    const GpuLoraMemory plan = EstimateGpuLoraTraining(
        config, {.tokens = m.opt.max_tokens, .rank = adapter->rank(), .remat = true, .precision = options.precision,
                 .trainable = adapter->ParameterCount(), .weight_bytes = int(DTypeSize(weights.embed.dtype))});
    size_t free_bytes = 0, total_bytes = 0;
    GK_RETURN_IF_ERROR(Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
    m.planned_bytes = plan.total;
    if (plan.total > double(free_bytes)) {
      return Status::Error(StrCat("the run needs about ", GiBText(plan.total), " of GPU memory (gemmakit plan's estimate, ",
                                  m.opt.max_tokens, " tokens per micro-batch); cuda:", options.device, " has ",
                                  GiBText(double(free_bytes)), " free of ", GiBText(double(total_bytes))));
    }
  }
  GK_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  m.embed_scale = ScaleInDtype(config.hidden_size, weights.checkpoint_dtype);
  if (config.hidden_size_per_layer_input > 0) {
    m.ple_embed_scale = ScaleInDtype(config.hidden_size_per_layer_input, weights.checkpoint_dtype);
  }
  m.rope = MakeLayerRope(config);
  GK_ASSIGN_OR_RETURN(m.base, UploadWeights(config, weights, random_seed, StrCat("cuda:", options.device), m.stream));
  if (config.enable_moe_block) {  // the host routes: it needs each layer's per-expert scales (random ones included)
    for (const DeviceLayer& L : m.base.layers) {
      std::vector<float>& h = m.h_expert_scale.emplace_back(size_t(config.num_experts));
      GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h.data(), L.per_expert_scale, h.size() * sizeof(float),
                                               cudaMemcpyDeviceToHost, m.stream), "copying the per-expert scales"));
    }
  }
  GK_RETURN_IF_ERROR(m.Allocate().Wrap(StrCat("training buffers for ", m.opt.max_tokens, " tokens on cuda:", options.device)));
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(m.stream), "setting up the training buffers"));
  GK_ASSIGN_OR_RETURN(m.gemm, cuda::GemmRunner::Create(m.stream));
  // f32 precision (and the router in either) promises f32 products, as TrainingModel's widened
  // weights give: the split in three exact terms (two leave ~2^-17 per activation).
  m.gemm->set_exact_split(true);
  std::unique_ptr<CudaTrainingModel> model(new CudaTrainingModel(std::move(impl)));
  GK_RETURN_IF_ERROR(model->UploadFactors());
  return model;
}

Status CudaTrainingModel::ForwardBackward(std::span<const TrainRowView> rows, float loss_scale, uint64_t dropout_key,
                                          MicroBatchStats* stats) {
  impl_->dropout_on = impl_->adapter->options().dropout > 0;
  impl_->dropout_key = dropout_key;
  // bf16 precision rounds the base products' activations to bf16, as TrainingModel does.
  ScopedBf16Activations mode(impl_->opt.precision == TrainPrecision::kBf16 ? Bf16Activations::kRound : Bf16Activations::kSplit);
  return impl_->Run(rows, loss_scale, true, stats);
}

Status CudaTrainingModel::Evaluate(std::span<const TrainRowView> rows, MicroBatchStats* stats) {
  impl_->dropout_on = false;
  ScopedBf16Activations mode(impl_->opt.precision == TrainPrecision::kBf16 ? Bf16Activations::kRound : Bf16Activations::kSplit);
  return impl_->Run(rows, 1.f, false, stats);
}

Status CudaTrainingModel::DownloadGradients() {
  Impl& m = *impl_;
  GK_RETURN_IF_ERROR(Check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  for (DeviceLora& d : m.lora) {
    d.host->grad_a.resize(d.grad_a.size());  // an adapter no CPU trainer has sized yet
    d.host->grad_b.resize(d.grad_b.size());
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(d.host->grad_a.data(), d.grad_a.data(), d.host->grad_a.size() * sizeof(float),
                                             cudaMemcpyDeviceToHost, m.stream), "copying LoRA gradients from the GPU"));
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(d.host->grad_b.data(), d.grad_b.data(), d.host->grad_b.size() * sizeof(float),
                                             cudaMemcpyDeviceToHost, m.stream), "copying LoRA gradients from the GPU"));
    GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(d.grad_a.data(), 0, d.grad_a.size() * sizeof(float), m.stream), "cudaMemset"));
    GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(d.grad_b.data(), 0, d.grad_b.size() * sizeof(float), m.stream), "cudaMemset"));
  }
  return Check(cudaStreamSynchronize(m.stream), "copying LoRA gradients from the GPU");
}

Status CudaTrainingModel::UploadFactors() {
  Impl& m = *impl_;
  GK_RETURN_IF_ERROR(Check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  for (DeviceLora& d : m.lora) {
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(d.a.data(), d.host->a.data(), d.host->a.size() * sizeof(float),
                                             cudaMemcpyHostToDevice, m.stream), "copying LoRA factors to the GPU"));
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(d.b.data(), d.host->b.data(), d.host->b.size() * sizeof(float),
                                             cudaMemcpyHostToDevice, m.stream), "copying LoRA factors to the GPU"));
  }
  return Check(cudaStreamSynchronize(m.stream), "copying LoRA factors to the GPU");
}

const ModelConfig& CudaTrainingModel::config() const { return impl_->c; }
int64_t CudaTrainingModel::activation_bytes() const { return int64_t(impl_->activation_bytes); }
TrainPrecision CudaTrainingModel::precision() const { return impl_->opt.precision; }
std::string CudaTrainingModel::device() const { return StrCat("cuda:", impl_->opt.device); }
uint64_t CudaTrainingModel::peak_device_bytes() const { return impl_->peak_used; }
double CudaTrainingModel::planned_device_bytes() const { return impl_->planned_bytes; }
uint64_t CudaTrainingModel::device_bytes() const { return impl_->base.bytes + impl_->other_bytes; }

}  // namespace gk
