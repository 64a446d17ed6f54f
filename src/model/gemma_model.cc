#include "model/gemma_model.h"

#include <algorithm>
#include <cmath>

#include "dist/communicator.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/decoder_constants.h"
#include "model/forward_scratch.h"
#include "model/lora_weights.h"
#include "model/paged_kv.h"
#include "model/weight_packing.h"

namespace gk {

Result<std::unique_ptr<GemmaModel>> GemmaModel::Load(const std::string& dir, ThreadPool* pool,
                                                     const ModelLoadOptions& options) {
  GK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GK_ASSIGN_OR_RETURN(ModelConfig local, ShardModelConfig(config, options.tp.size));
  // Quantizing reads each matrix once into new memory: map the files rather than copy them.
  const bool quantize = options.quantize != QuantType::kNone;
  GK_ASSIGN_OR_RETURN(ModelWeights weights,
                      LoadWeights(dir, config, quantize ? WeightLoadMode::kMmap : options.mode, options.tp));
  if (quantize) GK_RETURN_IF_ERROR(QuantizeWeights(&weights, options.quantize));
  if (options.pack) PackWeightsForCpu(&weights);
  return std::make_unique<GemmaModel>(std::move(local), std::move(weights), pool, options.max_chunk, options.tp);
}


GemmaModel::GemmaModel(ModelConfig config, ModelWeights weights, ThreadPool* pool, int max_chunk, TensorParallel tp)
    : config_(std::move(config)), weights_(std::move(weights)), pool_(pool), max_chunk_(std::max(1, max_chunk)),
      tp_(tp), s_(std::make_unique<ForwardScratch>()) {
  const ModelConfig& c = config_;
  vocab_ = VocabShard(c.vocab_size, tp_.size, tp_.rank);
  ple_vocab_ = VocabShard(c.vocab_size_per_layer_input, tp_.size, tp_.rank);
  // The scale rounds to the checkpoint's dtype, also when the weights were quantized since.
  embed_scale_ = ScaleInDtype(c.hidden_size, weights_.checkpoint_dtype);
  if (c.hidden_size_per_layer_input > 0) {
    ple_embed_scale_ = ScaleInDtype(c.hidden_size_per_layer_input, weights_.checkpoint_dtype);
  }
  rope_ = MakeLayerRope(c);

  const size_t T = size_t(max_chunk_), D = size_t(c.hidden_size);
  const size_t Hmax = size_t(c.MaxHeadDim());
  const size_t Kmax = size_t(c.MaxKvHeads());
  size_t Fmax = size_t(c.intermediate_size) * (c.use_double_wide_mlp ? 2 : 1);
  s_->x.resize(T * D);
  s_->x_emb.resize(T * D);
  s_->xn.resize(T * D);
  s_->q.resize(T * size_t(c.num_heads) * Hmax);
  s_->k.resize(T * Kmax * Hmax);
  s_->v.resize(T * Kmax * Hmax);
  s_->att.resize(T * size_t(c.num_heads) * Hmax);
  s_->out.resize(T * D);
  s_->rope.resize(rope_.head_dim.size());
  for (size_t i = 0; i < s_->rope.size(); ++i) s_->rope[i].resize(T * size_t(rope_.head_dim[i]));
  s_->gate.resize(T * Fmax);
  s_->up.resize(T * Fmax);
  if (c.hidden_size_per_layer_input > 0) {
    const size_t P = size_t(c.hidden_size_per_layer_input);
    s_->ple.resize(T * size_t(c.num_layers) * P);
    s_->ple_gate.resize(T * P);
    // Under tensor parallelism every token's row at once: the rows are summed over the group.
    s_->ple_tok.resize((tp_.active() ? T : 1) * size_t(c.num_layers) * P);
  }
  if (c.enable_moe_block) {
    s_->router.resize(T * size_t(c.num_experts));
    s_->moe_x.resize(T * D);
    s_->moe_out.resize(T * D);
    s_->expert_tmp.assign(size_t(pool_->size()), std::vector<float>(3 * size_t(c.moe_intermediate_size) + D));
  }
}

GemmaModel::~GemmaModel() = default;

KvCache GemmaModel::NewKvCache(int64_t max_tokens) const {
  KvCache cache;
  cache.max_tokens = max_tokens;
  cache.layers.resize(size_t(config_.num_layers));
  for (int l = 0; l < config_.num_layers; ++l) {
    KvLayer& kv = cache.layers[size_t(l)];
    kv.kv_heads = config_.KvHeads(l);
    kv.head_dim = config_.HeadDim(l);
    if (config_.IsKvShared(l)) continue;
    kv.capacity = config_.IsFull(l) ? max_tokens
                                    : std::min<int64_t>(max_tokens, config_.sliding_window + max_chunk_ - 1);
    // f32 weights give an f32 cache (exact), bf16 or quantised ones a 16-bit cache (half
    // the bytes attention streams); see kv_cache.h.
    kv.dtype = KvCacheDType(weights_.layers[size_t(l)].k.dtype);
    const size_t bytes = size_t(kv.capacity) * size_t(kv.kv_heads) * size_t(kv.head_dim) * kv.ElemBytes();
    kv.k = KvBuffer(bytes);  // zeroed, committed as positions are written
    kv.v = KvBuffer(bytes);
  }
  return cache;
}

Status GemmaModel::Forward(std::span<const int32_t> tokens, KvCache& cache, LogitsMode mode, float* logits) {
  const int64_t n = int64_t(tokens.size()), V = config_.vocab_size;
  for (int64_t b = 0; b < n; b += max_chunk_) {
    const int64_t T = std::min<int64_t>(max_chunk_, n - b);
    const bool last_chunk = b + T == n;
    BatchItem item{tokens.subspan(size_t(b), size_t(T)), &cache, LogitsMode::kNone};
    if (mode == LogitsMode::kAll) item.logits = LogitsMode::kAll;
    if (mode == LogitsMode::kLast && last_chunk) item.logits = LogitsMode::kLast;
    GK_RETURN_IF_ERROR(ForwardBatch({&item, 1}, mode == LogitsMode::kAll ? logits + b * V : logits));
  }
  return Status::Ok();
}

Status GemmaModel::CheckTokens(std::span<const int32_t> tokens) const { return CheckTokenIds(config_, tokens); }

Status GemmaModel::ForwardBatch(std::span<const BatchItem> items, float* logits) {
  int64_t total = 0;
  for (const BatchItem& it : items) {
    const int64_t n = int64_t(it.tokens.size());
    total += n;
    if (it.cache->num_tokens + n > it.cache->max_tokens) {
      return Status::Error(StrCat("sequence of ", it.cache->num_tokens + n, " tokens exceeds the context of ",
                                  it.cache->max_tokens, " tokens; shorten the prompt or raise the context length"));
    }
    GK_RETURN_IF_ERROR(CheckTokens(it.tokens));
  }
  if (total > max_chunk_) {
    return Status::Error(StrCat("batch of ", total, " tokens exceeds the model's ", max_chunk_, "-token pass"));
  }
  if (total == 0) return Status::Ok();
  RunBatch(items, logits);
  return Status::Ok();
}

// Under tensor parallelism the rank holding a token's row writes it and the others zeros: the
// sum over the group is the row, exactly.
void GemmaModel::Embed(const int32_t* tokens, int64_t T, float* x) {
  const int64_t D = config_.hidden_size;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = tokens[t] - vocab_.begin;
    if (row < 0 || row >= vocab_.rows) {
      std::fill(x + t * D, x + (t + 1) * D, 0.f);
      continue;
    }
    weights_.embed.RowToF32(row, x + t * D);
    Scale(x + t * D, D, embed_scale_);
  }
  TpSum(x, T * D);
}

void GemmaModel::TpSum(float* x, int64_t n) {
  if (tp_.active()) dist::OrAbort(*tp_.comm, tp_.comm->AllReduceSum(std::span<float>(x, size_t(n))), "tensor-parallel all-reduce");
}

namespace {

// Copies the rows whose logits the items want (contiguous, in item order) from the residual
// stream x to rows; returns their count. Item: BatchItem or PagedBatchItem.
template <class Item>
int64_t GatherLogitRows(std::span<const Item> items, const float* x, int64_t D, float* rows) {
  int64_t n_rows = 0, t = 0;
  for (const Item& it : items) {
    const int64_t n = int64_t(it.tokens.size());
    const int64_t first = it.logits == LogitsMode::kAll ? 0 : it.logits == LogitsMode::kLast ? n - 1 : n;
    for (int64_t i = first; i < n; ++i, ++n_rows) {
      std::copy(x + (t + i) * D, x + (t + i + 1) * D, rows + n_rows * D);
    }
    t += n;
  }
  return n_rows;
}

}  // namespace

void GemmaModel::RunBatch(std::span<const BatchItem> items, float* logits) {
  token_ids_.clear();
  token_cache_.clear();
  token_pos_.clear();
  for (const BatchItem& it : items) {
    for (size_t i = 0; i < it.tokens.size(); ++i) {
      token_ids_.push_back(it.tokens[i]);
      token_cache_.push_back(it.cache);
      token_pos_.push_back(it.cache->num_tokens + int64_t(i));
    }
  }
  RunDecoder(int64_t(token_ids_.size()));
  const int64_t rows = GatherLogitRows(items, s_->x.data(), config_.hidden_size, s_->xn.data());
  for (const BatchItem& it : items) it.cache->num_tokens += int64_t(it.tokens.size());
  if (rows > 0) Logits(rows, s_->xn.data(), logits);
}

// Embedding, then every layer over the batch's T tokens (token_ids_, token_pos_ and the
// per-token cache state set): the residual stream ends in s_->x.
void GemmaModel::RunDecoder(int64_t T) {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size;
  float* x = s_->x.data();
  Embed(token_ids_.data(), T, x);
  if (c.hidden_size_per_layer_input > 0) PerLayerInputs(token_ids_.data(), T, x);
  // Every layer rotates q and k at the same positions: each token's angles once per pass.
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      for (size_t i = 0; i < s_->rope.size(); ++i) {
        const int64_t H = rope_.head_dim[i];
        RopeCosSin(rope_.inv_freq[i].data(), H / 2, token_pos_[size_t(t)], s_->rope[i].data() + t * H);
      }
    }
  });
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = weights_.layers[size_t(l)];
    RmsNormRows(x, lw.input_norm.data(), T, D, c.rms_norm_eps, s_->xn.data());
    AttentionBlock(l, T);  // xn -> out
    RmsNormRows(s_->out.data(), lw.post_attn_norm.data(), T, D, c.rms_norm_eps, s_->out.data());
    Add(s_->out.data(), x, T * D);
    FeedForwardBlock(l, T);  // x -> out (dense MLP, plus experts on MoE layers)
    RmsNormRows(s_->out.data(), lw.post_ffw_norm.data(), T, D, c.rms_norm_eps, s_->out.data());
    Add(s_->out.data(), x, T * D);
    if (c.hidden_size_per_layer_input > 0) PerLayerInputBlock(l, T);
    if (lw.layer_scalar != 1.f) Scale(x, T * D, lw.layer_scalar);
  }
}

Status GemmaModel::ForwardPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) {
  GK_RETURN_IF_ERROR(CheckPagedPool(pool));
  int64_t total = 0;
  for (const PagedBatchItem& it : items) total += int64_t(it.tokens.size());
  if (total > max_chunk_) {
    return Status::Error(StrCat("batch of ", total, " tokens exceeds the model's ", max_chunk_, "-token pass"));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    GK_RETURN_IF_ERROR(CheckPagedItem(items[i], pool).Wrap(StrCat("paged batch item ", i)));
  }
  if (total == 0) return Status::Ok();
  RunPaged(items, pool, logits);
  return Status::Ok();
}

Status GemmaModel::CheckPagedPool(const PagedKvPool& pool) const {
  GK_RETURN_IF_ERROR(CheckPagedPoolShape(config_, pool));
  if (!pool.on_host()) return Status::Error("the paged KV pool is in device memory; the CPU runner needs a host pool");
  return Status::Ok();
}

Status GemmaModel::CheckPagedItem(const PagedBatchItem& it, const PagedKvPool& pool) const {
  if (it.lora != nullptr) {
    if (tp_.active()) return Status::Error("LoRA adapters are not supported under tensor parallelism");
    if (it.lora->num_layers() != config_.num_layers) {
      return Status::Error(StrCat("its LoRA adapter was made for ", it.lora->num_layers(), " layers, the model has ",
                                  config_.num_layers));
    }
  }
  return CheckPagedItemBlocks(config_, it, pool);
}

void GemmaModel::RunPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) {
  const ModelConfig& c = config_;
  const int64_t bs = pool.block_size();
  token_ids_.clear();
  token_cache_.clear();
  token_pos_.clear();
  token_span_.clear();
  paged_spans_.clear();
  lora_runs_.clear();
  int64_t blocks[2] = {0, 0};  // segments per kv head over all items, per group
  for (const PagedBatchItem& it : items) {
    const int64_t n = int64_t(it.tokens.size()), first = it.seq->num_tokens;
    PagedSpan sp;
    sp.seq = it.seq;
    for (int g = 0; g < 2 && n > 0; ++g) {
      sp.first_block[g] = FirstVisible(g == int(KvGroup::kFull), first) / bs;
      sp.num_blocks[g] = (first + n - 1) / bs - sp.first_block[g] + 1;
      sp.seg_base[g] = blocks[g];
      blocks[g] += sp.num_blocks[g];
    }
    if (it.lora != nullptr && n > 0) {
      const int64_t row = int64_t(token_ids_.size());
      LoraRun* last = lora_runs_.empty() ? nullptr : &lora_runs_.back();
      if (last != nullptr && last->lora == it.lora && last->row + last->rows == row) last->rows += n;
      else lora_runs_.push_back({row, n, it.lora});
    }
    for (int64_t i = 0; i < n; ++i) {
      token_ids_.push_back(it.tokens[size_t(i)]);
      token_pos_.push_back(first + i);
      token_span_.push_back(int32_t(paged_spans_.size()));
    }
    paged_spans_.push_back(sp);
  }
  const int64_t Kmax = c.MaxKvHeads();
  paged_segments_.resize(size_t(std::max(blocks[0], blocks[1]) * Kmax));  // keeps its capacity
  paged_pool_ = &pool;
  RunDecoder(int64_t(token_ids_.size()));
  paged_pool_ = nullptr;
  lora_runs_.clear();
  const int64_t rows = GatherLogitRows(items, s_->x.data(), c.hidden_size, s_->xn.data());
  if (rows > 0) Logits(rows, s_->xn.data(), logits);
}

void GemmaModel::ApplyLora(int l, std::initializer_list<LoraOutput> outputs, const float* x) {
  if (lora_runs_.empty()) return;
  lora_segments_.clear();
  for (const LoraOutput& o : outputs) {
    for (const LoraRun& run : lora_runs_) {
      const LoraWeights::Factors* f = run.lora->Find(l, o.target);
      if (f != nullptr) lora_segments_.push_back({run.row, run.rows, &f->a, &f->b, o.y});
    }
  }
  ApplyLoraSegments(lora_segments_, x, lora_scratch_, *pool_);
}

void GemmaModel::Logits(int64_t rows, const float* h, float* logits) {
  const int64_t D = config_.hidden_size;
  float* y = s_->xn.data();  // h may be y itself: the norm works in place
  RmsNormRows(h, weights_.final_norm.data(), rows, D, config_.rms_norm_eps, y);
  // Under tensor parallelism this rank's vocabulary columns first, then every rank's gathered.
  float* out = logits;
  if (tp_.active()) {
    s_->tp_logits.resize(size_t(rows * vocab_.per_rank));
    out = s_->tp_logits.data();
  }
  const int64_t Vl = weights_.embed.rows;
  MatMul(weights_.embed, y, rows, out, *pool_);
  if (config_.final_logit_softcap > 0.f) {
    pool_->ParallelFor(rows * Vl, [&](int64_t b, int64_t e, int) {
      Softcap(out + b, e - b, config_.final_logit_softcap);
    });
  }
  if (tp_.active()) GatherLogits(rows, logits);
}

// Every rank's (rows, its vocabulary rows) block, padded to (rows, per_rank), gathered (to every
// rank, or to rank 0 alone), then laid out as whole (rows, V) rows.
void GemmaModel::GatherLogits(int64_t rows, float* logits) {
  const int64_t V = config_.vocab_size, per = vocab_.per_rank;
  const std::span<const float> mine(s_->tp_logits.data(), size_t(rows * per));
  if (logits_to_rank0_only_) {
    s_->tp_gathered.resize(tp_.rank == 0 ? size_t(rows * per * tp_.size) : 0);
    dist::OrAbort(*tp_.comm, tp_.comm->Gather(mine, std::span<float>(s_->tp_gathered), 0),
                  "tensor-parallel gather of the logits");
    if (tp_.rank != 0) return;
  } else {
    s_->tp_gathered.resize(size_t(rows * per * tp_.size));
    dist::OrAbort(*tp_.comm, tp_.comm->AllGather(mine, std::span<float>(s_->tp_gathered)),
                  "tensor-parallel all-gather of the logits");
  }
  for (int r = 0; r < tp_.size; ++r) {
    const VocabRange v = VocabShard(V, tp_.size, r);
    const float* block = s_->tp_gathered.data() + int64_t(r) * rows * per;
    for (int64_t i = 0; i < rows; ++i) {
      std::copy(block + i * v.rows, block + (i + 1) * v.rows, logits + i * V + v.begin);
    }
  }
}

}  // namespace gk
