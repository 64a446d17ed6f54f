#include "model/paged_kv.h"

#include <new>

namespace gk {
namespace {

constexpr uint64_t kAlign = 64;  // every layer's K and V region starts on a cache line

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool SupportedDType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kFp8E4m3 || t == DType::kFp8E5m2;
}

// Bytes of one block of layer l's K (or V): kv_heads · block_size · head_dim elements.
uint64_t LayerBlockBytes(const ModelConfig& c, int l, int block_size, DType dtype) {
  return uint64_t(c.KvHeads(l)) * uint64_t(block_size) * uint64_t(c.HeadDim(l)) * DTypeSize(dtype);
}

bool OwnsKvIn(const ModelConfig& c, int l, KvGroup g) { return !c.IsKvShared(l) && LayerKvGroup(c, l) == g; }

class HostKvStorage final : public KvStorage {
 public:
  explicit HostKvStorage(size_t bytes) : buffer_(bytes) {}
  std::byte* data() override { return buffer_.data(); }
  size_t size() const override { return buffer_.size(); }
  bool on_host() const override { return true; }

 private:
  KvBuffer buffer_;
};

}  // namespace

Result<std::unique_ptr<KvStorage>> AllocateHostKvStorage(size_t bytes) {
  try {
    return std::unique_ptr<KvStorage>(new HostKvStorage(bytes));
  } catch (const std::bad_alloc&) {
    return Status::Error(StrCat("cannot allocate ", bytes, " bytes for the paged KV pool; use fewer blocks"));
  }
}

uint64_t PagedKvPool::BlockBytes(const ModelConfig& c, KvGroup g, int block_size, DType dtype) {
  uint64_t bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (OwnsKvIn(c, l, g)) bytes += 2 * LayerBlockBytes(c, l, block_size, dtype);
  }
  return bytes;
}

Result<std::unique_ptr<PagedKvPool>> PagedKvPool::Create(const ModelConfig& c, const PagedKvOptions& o,
                                                         const KvStorageAllocator& allocate) {
  using R = Result<std::unique_ptr<PagedKvPool>>;
  if (o.block_size < 1) return R::Error(StrCat("paged KV block size ", o.block_size, " must be at least 1"));
  if (!SupportedDType(o.dtype)) {
    return R::Error(StrCat("paged KV cache dtype ", DTypeName(o.dtype), " is not supported; use F32, F16, BF16, F8_E4M3 or F8_E5M2"));
  }
  std::unique_ptr<PagedKvPool> pool(new PagedKvPool());
  pool->block_size_ = o.block_size;
  pool->dtype_ = o.dtype;
  for (int g = 0; g < 2; ++g) {
    const char* name = g == int(KvGroup::kFull) ? "full-attention" : "sliding-window";
    pool->has_group_[g] = BlockBytes(c, KvGroup(g), 1, o.dtype) > 0;
    pool->num_blocks_[g] = pool->has_group_[g] ? o.num_blocks[g] : 0;
    if (pool->has_group_[g] && (o.num_blocks[g] < 1 || o.num_blocks[g] > INT32_MAX)) {
      return R::Error(StrCat("paged KV pool needs 1 to 2147483647 blocks for the model's ", name,
                             " layers, got ", o.num_blocks[g]));
    }
  }
  // Every layer's K then V region in one mapping (the sizes fit: at most 2^31 - 1 blocks of
  // a few MiB each).
  std::vector<uint64_t> offset(size_t(c.num_layers), 0), region(size_t(c.num_layers), 0);
  uint64_t total = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.IsKvShared(l)) continue;
    const int64_t blocks = pool->num_blocks_[int(LayerKvGroup(c, l))];
    region[size_t(l)] = AlignUp(LayerBlockBytes(c, l, o.block_size, o.dtype) * uint64_t(blocks));
    offset[size_t(l)] = total;
    total += 2 * region[size_t(l)];
  }
  GK_ASSIGN_OR_RETURN(pool->storage_, allocate(size_t(total)));
  pool->layers_.resize(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    Layer& L = pool->layers_[size_t(l)];
    L.kv_heads = c.KvHeads(l);
    L.head_dim = c.HeadDim(l);
    if (c.IsKvShared(l)) continue;
    L.k = pool->storage_->data() + offset[size_t(l)];
    L.v = L.k + region[size_t(l)];
  }
  return R(std::move(pool));
}

void PagedKvPool::Write(int l, int32_t block, int slot, int head, const float* key, const float* value) {
  const Layer& L = layers_[size_t(l)];
  const size_t off = RowOffset(L, block, head, slot);
  ConvertFromF32(dtype_, key, L.head_dim, L.k + off);  // as KvLayer::Write: rounded, saturating
  ConvertFromF32(dtype_, value, L.head_dim, L.v + off);
}

Status CheckTokenIds(const ModelConfig& c, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t id = tokens[i];
    if (id < 0 || id >= c.vocab_size) {
      return Status::Error(StrCat("token id ", id, " at position ", i, " is outside the model's ", c.vocab_size,
                                  "-row embedding"));
    }
  }
  return Status::Ok();
}

Status CheckPagedPoolShape(const ModelConfig& c, const PagedKvPool& pool) {
  bool same = pool.num_layers() == c.num_layers;
  for (int l = 0; same && l < c.num_layers; ++l) {
    same = pool.OwnsKv(l) == !c.IsKvShared(l) && pool.kv_heads(l) == c.KvHeads(l) && pool.head_dim(l) == c.HeadDim(l);
  }
  if (!same) return Status::Error("the paged KV pool was created for a model of another shape");
  return Status::Ok();
}

Status CheckPagedItemBlocks(const ModelConfig& c, const PagedBatchItem& it, const PagedKvPool& pool) {
  if (it.seq == nullptr) return Status::Error("has no PagedSequence");
  const PagedSequence& seq = *it.seq;
  if (seq.num_tokens < 0) return Status::Error(StrCat("sequence has ", seq.num_tokens, " tokens"));
  GK_RETURN_IF_ERROR(CheckTokenIds(c, it.tokens));
  const int64_t n = int64_t(it.tokens.size()), bs = pool.block_size();
  if (n == 0) return Status::Ok();
  const int64_t first = seq.num_tokens, last = first + n - 1;
  for (int g = 0; g < 2; ++g) {
    if (!pool.HasGroup(KvGroup(g))) continue;
    const char* name = g == int(KvGroup::kFull) ? "full-attention" : "sliding-window";
    const std::span<const int32_t> table = seq.blocks[g];
    if (int64_t(table.size()) <= last / bs) {
      return Status::Error(StrCat("the ", name, " block table has ", table.size(), " blocks of ", bs,
                                  " positions; position ", last, " needs block ", last / bs));
    }
    for (int64_t b = FirstVisiblePosition(c, g == int(KvGroup::kFull), first) / bs; b <= last / bs; ++b) {
      const int32_t id = table[size_t(b)];
      if (id < 0 || id >= pool.num_blocks(KvGroup(g))) {
        return Status::Error(StrCat("the ", name, " block table's block ", b, " (positions ", b * bs, "..",
                                    (b + 1) * bs - 1, ") is ", id, ", which is ",
                                    id < 0 ? "freed but still visible" : "not a block of the pool",
                                    " (the pool has ", pool.num_blocks(KvGroup(g)), ")"));
      }
    }
  }
  return Status::Ok();
}

}  // namespace gk
