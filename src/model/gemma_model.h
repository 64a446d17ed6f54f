// The Gemma 4 (and Gemma 3) text decoder on CPU: load a Hugging Face checkpoint, run a chunk
// of tokens through the decoder appending to a KV cache, produce logits.
// Thread safety: one thread drives a model at a time (the engine thread); the model uses the
// ThreadPool it was given for data-parallel loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/lora_segments.h"
#include "model/config.h"
#include "model/decoder_constants.h"
#include "model/kv_cache.h"
#include "model/model_runner.h"
#include "model/quantize.h"
#include "model/tensor_parallel.h"
#include "model/train/lora.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace gk {

struct ForwardScratch;
class LoraWeights;           // model/lora_weights.h

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
  // Tensor parallelism: load only this rank's share and sum partial products over the group
  // (model/tensor_parallel.h). Every rank must then run the same calls with the same inputs.
  TensorParallel tp;
};

class GemmaModel final : public ModelRunner {
 public:
  static Result<std::unique_ptr<GemmaModel>> Load(const std::string& dir, ThreadPool* pool,
                                                  const ModelLoadOptions& options = {});
  // config: the rank's local config under tensor parallelism (ShardModelConfig), weights its share.
  GemmaModel(ModelConfig config, ModelWeights weights, ThreadPool* pool, int max_chunk, TensorParallel tp = {});
  ~GemmaModel() override;

  // Under tensor parallelism: this rank's share (its heads and MLP width; the vocabulary whole).
  const ModelConfig& config() const override { return config_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Tensor parallelism where only rank 0 samples (serve --tp): every rank must set it alike;
  // the logits are then gathered to rank 0 alone, and the others' logits buffers are not written.
  void set_logits_to_rank0_only(bool on) { logits_to_rank0_only_ = on; }
  const ModelWeights& weights() const { return weights_; }
  int max_chunk() const override { return max_chunk_; }
  std::string device() const override { return "cpu"; }
  std::string weight_prefix() const override { return weights_.prefix; }
  DType default_kv_dtype() const override { return KvCacheDType(weights_.layers[0].k.dtype); }
  Result<std::unique_ptr<PagedKvPool>> NewPagedKvPool(const PagedKvOptions& o) override {
    return PagedKvPool::Create(config_, o);
  }

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

  // Like ForwardBatch, but K/V live in a shared block pool (the serving engine's paged cache,
  // model/paged_kv.h). Each item's block tables must cover its new positions in both groups,
  // and in the sliding group every block holding a position inside the window of a new token.
  // The model does not change the PagedSequence (the engine advances num_tokens). Same logits
  // order as ForwardBatch. Errors: token ids outside the vocabulary, more than max_chunk
  // tokens, a block table that does not cover the positions (or a -1/out-of-range block id
  // where one is needed), a pool made for another model, a LoRA adapter made for another
  // model or under tensor parallelism.
  // Items with a LoRA adapter add its delta to each adapted projection of their tokens; items
  // next to each other with the same adapter form one segment (kernels/lora_segments.h), so a
  // caller that orders items by adapter gets the fewest.
  Status ForwardPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) override;

 private:
  // Per item of a paged batch, per KV group: the logical blocks its tokens attend over,
  // [first_block, first_block + num_blocks), and where their segments start in
  // paged_segments_ (in blocks; times K for a layer with K kv heads).
  struct PagedSpan {
    const PagedSequence* seq = nullptr;
    int64_t first_block[2] = {0, 0};
    int64_t num_blocks[2] = {0, 0};
    int64_t seg_base[2] = {0, 0};
  };

  Status CheckTokens(std::span<const int32_t> tokens) const;
  Status CheckPagedPool(const PagedKvPool& pool) const;
  Status CheckPagedItem(const PagedBatchItem& it, const PagedKvPool& pool) const;
  // The first position a token at `pos` sees (causal; sliding layers also windowed).
  int64_t FirstVisible(bool full, int64_t pos) const { return FirstVisiblePosition(config_, full, pos); }
  void RunBatch(std::span<const BatchItem> items, float* logits);
  void RunPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits);
  void RunDecoder(int64_t T);
  void StoreKv(int l, int64_t t, int head, const float* key, const float* value);
  void BuildPagedSegments(int source);
  DType TokenSegments(int source, int64_t t, int kv_head, AttentionTask& task) const;
  void Embed(const int32_t* tokens, int64_t T, float* x);
  void PerLayerInputs(const int32_t* tokens, int64_t T, const float* x_emb);
  void AttentionBlock(int l, int64_t T);
  void Attend(int l, int64_t T);
  void FeedForwardBlock(int l, int64_t T);
  void MoeBlock(int l, int64_t T);
  void PerLayerInputBlock(int l, int64_t T);
  void Logits(int64_t rows, const float* h, float* logits);
  // The LoRA deltas of the paged batch's adapted rows for projections of layer l that read the
  // same input x (T rows): each target's output (T rows of its width) += its delta. Nothing
  // when no item has an adapter.
  struct LoraOutput {
    LoraTarget target;
    float* y;
  };
  void ApplyLora(int l, std::initializer_list<LoraOutput> outputs, const float* x);
  // Tensor parallelism: x ← Σ over the group of x (partial products of row-parallel matrices).
  void TpSum(float* x, int64_t n);
  // Logits of this rank's vocabulary rows (local, rows × vocab_.rows) gathered into whole rows.
  void GatherLogits(int64_t rows, float* logits);

  ModelConfig config_;
  ModelWeights weights_;
  ThreadPool* pool_;
  int max_chunk_;
  TensorParallel tp_;
  bool logits_to_rank0_only_ = false;
  VocabRange vocab_, ple_vocab_;  // the embedding rows (and PLE table rows) this rank holds
  float embed_scale_ = 1.f;
  float ple_embed_scale_ = 1.f;
  LayerRope rope_;
  std::unique_ptr<ForwardScratch> s_;
  std::vector<KvCache*> token_cache_;  // per token of the running batch: its sequence's cache
  std::vector<int64_t> token_pos_;     // per token: its position
  std::vector<int32_t> token_ids_;     // the batch's tokens, concatenated
  // The paged batch running (ForwardPaged), null otherwise; grown buffers are kept, so a warm
  // decode step allocates nothing.
  PagedKvPool* paged_pool_ = nullptr;
  std::vector<PagedSpan> paged_spans_;   // per item
  std::vector<int32_t> token_span_;      // per token: its item's index in paged_spans_
  std::vector<KvSegment> paged_segments_;  // per layer: each item's blocks per kv head
  // LoRA adapters of the paged batch: runs of consecutive rows with the same adapter.
  struct LoraRun {
    int64_t row = 0, rows = 0;
    const LoraWeights* lora = nullptr;
  };
  std::vector<LoraRun> lora_runs_;
  std::vector<LoraSegment> lora_segments_;
  LoraScratch lora_scratch_;
};

}  // namespace gk
