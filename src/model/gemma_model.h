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
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace gk {

struct ForwardScratch;

enum class LogitsMode { kNone, kLast, kAll };

struct ModelLoadOptions {
  WeightLoadMode mode = WeightLoadMode::kCopy;
  int max_chunk = 256;  // tokens per forward pass (prefill is cut into chunks of this size)
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

 private:
  void ForwardChunk(const int32_t* tokens, int64_t T, KvCache& cache, LogitsMode mode, float* logits);
  void Embed(const int32_t* tokens, int64_t T, float* x);
  void PerLayerInputs(const int32_t* tokens, int64_t T, const float* x_emb);
  void AttentionBlock(int l, int64_t T, int64_t pos0, KvCache& cache);
  void Attend(int l, int64_t T, int64_t pos0, const KvLayer& kv);
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
};

}  // namespace gk
