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

}  // namespace

uint64_t PagedKvPool::BlockBytes(const ModelConfig& c, KvGroup g, int block_size, DType dtype) {
  uint64_t bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (OwnsKvIn(c, l, g)) bytes += 2 * LayerBlockBytes(c, l, block_size, dtype);
  }
  return bytes;
}

Result<std::unique_ptr<PagedKvPool>> PagedKvPool::Create(const ModelConfig& c, const PagedKvOptions& o) {
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
  try {
    pool->storage_ = KvBuffer(size_t(total));
  } catch (const std::bad_alloc&) {
    return R::Error(StrCat("cannot allocate ", total, " bytes for the paged KV pool; use fewer blocks"));
  }
  pool->layers_.resize(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    Layer& L = pool->layers_[size_t(l)];
    L.kv_heads = c.KvHeads(l);
    L.head_dim = c.HeadDim(l);
    if (c.IsKvShared(l)) continue;
    L.k = pool->storage_.data() + offset[size_t(l)];
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

}  // namespace gk
