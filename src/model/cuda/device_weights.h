// The base weights on one CUDA device, shared by the inference runner (CudaModel) and the
// trainer's (CudaTrainingModel): every matrix in the checkpoint's dtype (bf16 or f32) and every
// vector in f32, in one allocation of 256-byte aligned pieces, with each layer's views into it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/gemm.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/result.h"

namespace gk {

struct DeviceLayer {  // views into DeviceWeights::arena; absent tensors have null data

  cuda::DeviceMatrix q, k, v, o, gate, up, down, ple_gate, ple_proj, router;
  // gate's rows and up's as one matrix where they lie back to back in the arena (else empty):
  // one product for both in passes of few tokens. qkv likewise, for passes of any length: q's,
  // k's and v's rows (q's and k's on K=V layers, which have no v).
  cuda::DeviceMatrix gate_up, qkv;
  const float* input_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* pre_ffw_norm = nullptr;
  const float* post_ffw_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_ple_norm = nullptr;
  // Mixture of experts (26B-A4B).
  const float* router_weight = nullptr;  // router.scale · D^-½: RMSNorm with it is the router's input
  const float* per_expert_scale = nullptr;
  const float* pre_ffw_norm_2 = nullptr;
  const float* post_ffw_norm_1 = nullptr;
  const float* post_ffw_norm_2 = nullptr;
  std::vector<cuda::DeviceMatrix> expert_gate_up, expert_down;
  float layer_scalar = 1.f;
};

struct DeviceWeights {
  cuda::DeviceBuffer<std::byte> arena;
  uint64_t bytes = 0;  // the arena's
  std::vector<DeviceLayer> layers;
  cuda::DeviceMatrix embed, ple_embed, ple_model_proj;
  const float* final_norm = nullptr;
  const float* ple_proj_norm = nullptr;
};

// Copies w to the device on `stream`; matrices without data get seeded random values, uniform
// with the variance of PyTorch's default Linear init (CreateRandom). The MoE router's norm
// weight is stored pre-scaled (router.scale · D^-½). Errors: not enough free memory (what the
// weights need and the device has), CUDA's.
Result<DeviceWeights> UploadWeights(const ModelConfig& c, const ModelWeights& w, uint64_t random_seed,
                                    const std::string& device_name, cudaStream_t stream);

// The per-layer inputs of E2B/E4B (GemmaModel::PerLayerInputs), T tokens × L layers × P:
// ple = (RMSNorm_P(x_emb · W_plmᵀ · D^-½) + E_ple[token] · ple_embed_scale) · 2^-½, from the
// scaled embeddings x_emb (T × D); ids past the PLE table take the pad token's row. tok: T × L × P
// scratch. Both GPU runners call it.
Status PerLayerInputs(const ModelConfig& c, const DeviceWeights& w, cuda::GemmRunner& gemm, const float* x_emb,
                      const int32_t* tokens, int64_t T, float ple_embed_scale, float* ple, float* tok,
                      cudaStream_t stream);

}  // namespace gk
