// The Gemma 4 / Gemma 3 decoder on one CUDA device: the GPU's ModelRunner (model/model_runner.h),
// computing what GemmaModel computes on the CPU (the same config, weights and paged-pool layout;
// tests compare the two). Weights and the KV pool live in device memory; the engine's block
// tables are copied to the device once per pass; each row's token is picked on the device
// (kernels/cuda/token_pick.h) and the rows come back as host f32 rows unless only their token
// is wanted.
//
// Runs: the Gemma 4 family (31B's K=V global layers, head dims up to 512 and proportional RoPE,
// E2B/E4B's per-layer embeddings and KV sharing, 26B-A4B's mixture of experts) and Gemma 3,
// bf16 or f32 weights, KV in f32, f16, bf16 or fp8. Refused with one line: quantized weights,
// LoRA adapters, tensor parallelism.
// Thread safety: one thread drives it at a time (the engine thread), as GemmaModel.
#pragma once

#include <memory>
#include <string>

#include "model/model_runner.h"
#include "model/weights.h"

namespace gk {

struct CudaModelOptions {
  int device = 0;                      // cuda:N
  int max_chunk = 256;                 // tokens per forward pass
  double gpu_memory_utilization = 0.9; // share of the device's memory weights + KV may take (vLLM's flag)
  // A sequence's run of at least this many new tokens attends through tensor-core products
  // (kernels/cuda/attention_prefill.h); shorter runs and decode steps through paged_attention.h.
  int prefill_gemm_min_tokens = 64;
  // How those runs attend: through cuBLASLt products (kernels/cuda/attention_prefill.h), or the
  // fused FlashAttention-style kernel (kernels/cuda/flash_attention.h; 16-bit and fp8 caches,
  // f32 caches keep the products).
  enum class PrefillAttention { kProducts, kFlash };
  PrefillAttention prefill_attention = PrefillAttention::kProducts;
  // Decode steps (one token per sequence) captured once per batch size as CUDA graphs and
  // replayed (vLLM's CUDA graphs; false: --enforce-eager).
  bool cuda_graphs = true;
  // Products of bf16 weights on passes of at most this many tokens (decode steps at small batch)
  // through the GEMV kernel (kernels/cuda/gemv.h) instead of cuBLASLt; 0: cuBLASLt always.
  int gemv_max_tokens = 0;
  // Batch-invariant passes (vLLM's VLLM_BATCH_INVARIANT): a row's logits have the same bits
  // whatever else the pass holds (how many rows, how its prompt was chunked, other contexts'
  // lengths), so a greedy request gives the same text alone and in a crowd. Every product of a
  // weight takes one cuBLASLt algorithm without split-K whatever its row count (GemmRunner::
  // set_batch_invariant; no GEMV kernel); every row attends through the paged kernel (no
  // prefill products or fused kernel), its positions split into ranges of a length fixed by the
  // pool. Costs: prefill attention reads the cache once per row, and products of few rows lose
  // split-K's parallelism.
  bool batch_invariant = false;
};

struct CudaGraphStats {
  int64_t captured = 0;  // graphs captured (again, after a buffer moved or another pool)
  int64_t replayed = 0;  // decode steps run by replaying one
  int64_t nodes = 0;     // operations (kernels, copies) in the graph captured last: one decode step's
};

class CudaModel final : public ModelRunner {
 public:
  // Reads a Hugging Face checkpoint (mapped, not copied) and uploads it.
  static Result<std::unique_ptr<CudaModel>> Load(const std::string& dir, const CudaModelOptions& o);
  // Uploads weights held in host memory (row-major bf16 or f32 matrices: not packed, not
  // quantized). Errors: what the runner does not run, not enough device memory (how much the
  // model needs and the device has), CUDA errors.
  static Result<std::unique_ptr<CudaModel>> Create(const ModelConfig& config, const ModelWeights& weights,
                                                   const CudaModelOptions& o);
  // Random weights made on the GPU (bench --preset: no checkpoint, no host copy): the config's
  // tensors in dtype (bf16 or f32), uniform with PyTorch Linear's default range, norms of ones.
  static Result<std::unique_ptr<CudaModel>> CreateRandom(const ModelConfig& config, DType dtype, uint64_t seed,
                                                         const CudaModelOptions& o);
  ~CudaModel() override;

  const ModelConfig& config() const override;
  int max_chunk() const override;
  std::string device() const override;
  std::string weight_prefix() const override;
  DType default_kv_dtype() const override;
  uint64_t kv_memory_budget() const override;
  Result<std::unique_ptr<PagedKvPool>> NewPagedKvPool(const PagedKvOptions& o) override;
  Status ForwardPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) override;
  bool picks_tokens() const override { return true; }
  const int32_t* picked_tokens() const override;

  CudaGraphStats graph_stats() const;
  // Device bytes the weights take, and those a decode step reads (all but the PLE table, a lookup).
  uint64_t weight_bytes() const;
  uint64_t decode_bytes_per_token() const;

 private:
  struct Impl;
  explicit CudaModel(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<CudaModel>> Make(const ModelConfig& config, const ModelWeights& weights,
                                                 const CudaModelOptions& o, uint64_t random_seed);
  std::unique_ptr<Impl> impl_;
};

// The checkpoint's tensors of config's shape in dtype with no data (the GPU runners fill such
// matrices with random values: CreateRandom); vectors (norms, scales) are ones.
ModelWeights WeightShapes(const ModelConfig& config, DType dtype);

// Whether CudaModel runs a model of this config and these weights' dtypes: one line saying what
// it does not run, else Ok. (Also checked by Create.)
Status CheckCudaSupport(const ModelConfig& c, const ModelWeights& w);

}  // namespace gk
