// The Gemma 4 (and Gemma 3) text decoder on CPU: load a Hugging Face checkpoint, run a chunk
// of tokens through the decoder appending to a KV cache, produce logits.
// Thread safety: one thread drives a model at a time (the engine thread); the model uses the
// ThreadPool it was given for data-parallel loops.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace gk {

struct ForwardScratch;

enum class LogitsMode { kNone, kLast, kAll };

// One sequence's share of a batched forward pass: its new tokens, at positions
// cache->num_tokens onwards, and which logit rows it wants back.
struct BatchItem {
  std::span<const int32_t> tokens;
  KvCache* cache = nullptr;
  LogitsMode logits = LogitsMode::kLast;
};

struct ModelLoadOptions {
  WeightLoadMode mode = WeightLoadMode::kCopy;
  int max_chunk = 256;  // tokens per forward pass (prefill is cut into chunks of this size)
  bool pack = true;     // repack bf16 weights for the CPU's dot-product kernels (weight_packing.h)
  QuantType quantize = QuantType::kNone;  // quantize the matrices at load (model/quantize.h)
};

class GemmaModel {
 public:
  static Result<std::unique_ptr<GemmaModel>> Load(const std::string& dir, ThreadPool* pool,
                                                  const ModelLoadOptions& options = {});
  GemmaModel(ModelConfig config, ModelWeights weights, ThreadPool* pool, int max_chunk);
  ~GemmaModel();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  int max_chunk() const { return max_chunk_; }

  // A cache for up to max_tokens positions.
  KvCache NewKvCache(int64_t max_tokens) const;

  // Runs tokens at positions cache.num_tokens, ... through the decoder, appending their K/V.
  // logits receives V floats per returned row: every token's (kAll), the last one's (kLast).
  // Errors: token ids outside the embedding, or more tokens than the cache holds.
  Status Forward(std::span<const int32_t> tokens, KvCache& cache, LogitsMode mode, float* logits);

  // Several sequences in one pass (continuous batching): the weights are streamed once for
  // all their tokens, each token attends over its own sequence's cache. At most max_chunk
  // tokens in all. Logit rows are written to `logits` in item order: every token's row for
  // kAll, the last token's for kLast, none for kNone.
  Status ForwardBatch(std::span<const BatchItem> items, float* logits);

 private:
  void RunBatch(std::span<const BatchItem> items, float* logits);
  void Embed(const int32_t* tokens, int64_t T, float* x);
  void PerLayerInputs(const int32_t* tokens, int64_t T, const float* x_emb);
  void AttentionBlock(int l, int64_t T);
  void Attend(int l, int64_t T);
  void FeedForwardBlock(int l, int64_t T);
  void MoeBlock(int l, int64_t T);
  void PerLayerInputBlock(int l, int64_t T);
  void Logits(int64_t rows, const float* h, float* logits);

  ModelConfig config_;
  ModelWeights weights_;
  ThreadPool* pool_;
  int max_chunk_;
  float embed_scale_ = 1.f;
  float ple_embed_scale_ = 1.f;
  std::vector<float> inv_freq_sliding_, inv_freq_full_;
  std::unique_ptr<ForwardScratch> s_;
  std::vector<KvCache*> token_cache_;  // per token of the running batch: its sequence's cache
  std::vector<int64_t> token_pos_;     // per token: its position
  std::vector<int32_t> token_ids_;     // the batch's tokens, concatenated
};

}  // namespace gk
