// Paged KV cache (PagedAttention-style) for the serving engine: one pool of fixed-size blocks
// shared by every sequence, each sequence holding a table of block ids per KV group. The
// engine owns allocation (which block holds which positions); the model only reads and writes
// the blocks a PagedSequence names (GemmaModel::ForwardPaged).
//
// Layout per layer with own KV: K and V each [block][kv_head][slot_in_block][head_dim], so one
// block of one head is one attention segment (block_size rows, head_dim apart). Block b of a
// group is at index b in every layer of that group; KV-shared layers (E2B/E4B) own no storage
// and read their source layer's. Element types: f32, f16, bf16 or fp8 (E4M3, E5M2), converted by
// ConvertFromF32 (rounded to nearest even; f16 and fp8 saturate), as KvLayer::Write does.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/attention.h"
#include "kernels/token_pick.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk {

class LoraWeights;  // model/lora_weights.h

// Which logit rows a sequence's share of a forward pass returns: none, its last token's, or
// every token's.
enum class LogitsMode { kNone, kLast, kAll };

// Layers of the model fall into two KV groups: full-attention layers (every position) and
// sliding-window layers (only the window). KV-shared layers (E2B/E4B: config.IsKvShared(l)) own
// no storage: they read their source layer's (config.KvSourceLayer(l)).
enum class KvGroup : int { kFull = 0, kSliding = 1 };

inline KvGroup LayerKvGroup(const ModelConfig& c, int l) { return c.IsFull(l) ? KvGroup::kFull : KvGroup::kSliding; }

struct PagedKvOptions {
  int block_size = 16;              // positions per block
  DType dtype = DType::kF16;        // kF32, kF16, kBF16, kFp8E4m3 or kFp8E5m2
  int64_t num_blocks[2] = {0, 0};   // pool size per group (index by int(KvGroup))
};

// Where a pool's bytes live: host memory (the CPU runner's, the default) or a device's (the
// CUDA runner allocates them in GPU memory). The pool only lays out regions inside data().
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
  virtual bool on_host() const = 0;
};
// Allocates `bytes` of zero-filled storage, or says why it cannot.
using KvStorageAllocator = std::function<Result<std::unique_ptr<KvStorage>>(size_t bytes)>;
// Host memory (KvBuffer: anonymous, zero-filled, huge pages requested).
Result<std::unique_ptr<KvStorage>> AllocateHostKvStorage(size_t bytes);

class PagedKvPool {
 public:
  // Bytes one block of group g takes over all layers of the group that own KV (K and V).
  // 0 when the group has no such layer (e.g. a model without sliding layers).
  static uint64_t BlockBytes(const ModelConfig& c, KvGroup g, int block_size, DType dtype);
  // Allocates the storage with `allocate` (default: host memory, committed on first write).
  // Errors: block_size < 1, unsupported dtype, a group with layers but 0 blocks (or more than
  // 2^31 - 1), allocation failure.
  static Result<std::unique_ptr<PagedKvPool>> Create(const ModelConfig& c, const PagedKvOptions& o,
                                                     const KvStorageAllocator& allocate = AllocateHostKvStorage);

  int block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t num_blocks(KvGroup g) const { return num_blocks_[int(g)]; }
  bool HasGroup(KvGroup g) const { return has_group_[int(g)]; }
  uint64_t bytes() const { return storage_->size(); }
  bool on_host() const { return storage_->on_host(); }

  // For the model. Layer l must own KV (not KV-shared); block in [0, num_blocks(group of l)).
  int num_layers() const { return int(layers_.size()); }
  int kv_heads(int l) const { return layers_[size_t(l)].kv_heads; }
  int head_dim(int l) const { return layers_[size_t(l)].head_dim; }
  bool OwnsKv(int l) const { return layers_[size_t(l)].k != nullptr; }
  // Layer l's K and V regions, [block][kv_head][slot][head_dim] (device pointers when the
  // storage is a device's): what device kernels index.
  std::byte* KData(int l) const { return layers_[size_t(l)].k; }
  std::byte* VData(int l) const { return layers_[size_t(l)].v; }
  // Host storage only (on_host()):
  // Stores K and V rows (head_dim floats each) of `head` at `slot` of `block`, converted.
  void Write(int l, int32_t block, int slot, int head, const float* key, const float* value);
  // The whole block of one head as one segment (block_size positions).
  KvSegment Segment(int l, int32_t block, int head) const {
    const Layer& L = layers_[size_t(l)];
    const size_t off = RowOffset(L, block, head, 0);
    return {L.k + off, L.v + off, block_size_, L.head_dim};
  }

 private:
  struct Layer {
    std::byte* k = nullptr;  // null on KV-shared layers
    std::byte* v = nullptr;
    int kv_heads = 0;
    int head_dim = 0;
  };
  PagedKvPool() = default;
  size_t RowOffset(const Layer& L, int32_t block, int head, int slot) const {
    return size_t(((int64_t(block) * L.kv_heads + head) * block_size_ + slot) * L.head_dim) * DTypeSize(dtype_);
  }

  int block_size_ = 0;
  DType dtype_ = DType::kF16;
  int64_t num_blocks_[2] = {0, 0};
  bool has_group_[2] = {false, false};
  std::vector<Layer> layers_;  // per model layer
  std::unique_ptr<KvStorage> storage_;  // every layer's K and V regions, 64-byte aligned
};

// One sequence's view for a forward pass. blocks[g][i] is the pool block of group g that holds
// positions [i*block_size, (i+1)*block_size) (logical block i); -1 marks a block the engine has
// freed because it lies wholly outside the sliding window (sliding group only).
struct PagedSequence {
  std::span<const int32_t> blocks[2];
  int64_t num_tokens = 0;  // positions already in the cache; new tokens start here
};

struct PagedBatchItem {
  std::span<const int32_t> tokens;  // new tokens at positions seq->num_tokens, ...
  const PagedSequence* seq = nullptr;
  LogitsMode logits = LogitsMode::kLast;
  const LoraWeights* lora = nullptr;  // the item's LoRA adapter (model/lora_weights.h); null: the base model
  // Its logits row is wanted only for its next token (a request without logprobs): a runner
  // that picks tokens where the logits are (ModelRunner::picks_tokens) may leave the row
  // unwritten rather than copy it to the host.
  bool token_only = false;
  // How such a runner picks the item's token (kernels/token_pick.h): greedy by default.
  TokenPick pick{};
};

// Checks every runner makes before a paged pass (GemmaModel::ForwardPaged has the contract).
// The first position a token at `pos` sees on a layer of group full / sliding.
inline int64_t FirstVisiblePosition(const ModelConfig& c, bool full, int64_t pos) {
  return full ? 0 : std::max<int64_t>(0, pos - c.sliding_window + 1);
}
// Token ids inside the model's vocabulary.
Status CheckTokenIds(const ModelConfig& c, std::span<const int32_t> tokens);
// The pool was made for this model's shape (layers, heads, head dims, KV sharing).
Status CheckPagedPoolShape(const ModelConfig& c, const PagedKvPool& pool);
// The item's tokens are valid and its block tables cover every position its tokens write or see.
Status CheckPagedItemBlocks(const ModelConfig& c, const PagedBatchItem& it, const PagedKvPool& pool);

}  // namespace gk
