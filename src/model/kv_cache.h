// Per-sequence KV cache of the decoder. Element type (KvCacheDType): f32 when the weights are
// f32 (keeps the float32 oracle exact), otherwise a 16-bit type, which halves the bytes
// attention streams per token. The 16-bit type is f16, not bf16: Gemma 4's K and V are
// RMS-normalised (|x| ≤ √H · |norm weight|), well inside f16's range, and f16's 3 extra
// mantissa bits matter — on the oracle's random checkpoints bf16 K/V alone moves the logits by
// 0.3–3.4 % (over the 1 % bf16 tolerance), f16 by 0.05–0.4 %. Values beyond ±65504 (possible
// only for Gemma 3's unnormalised V) saturate. Writes round to nearest even; attention widens
// back to f32 in registers. bf16 caches work too (kernels and Write take all three types).
// Full layers keep every position; sliding layers keep a ring of window + chunk - 1 slots
// (enough for a chunk of `chunk` new tokens to see its whole window while being written).
// KV-shared layers (E2B/E4B) have no storage: they read their source layer's cache.
// Layout per layer: k/v[kv_head][slot][H], so each head's positions are one sequential stream
// for attention (slot-major rows would make every read a stride of kv_heads·H, a new page
// per row for wide heads, which the hardware prefetchers do not follow).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace gk {

// Zero-filled anonymous memory for K or V, with transparent huge pages requested (attention
// streams it; 4 KiB pages cost ~10 % of the decode bandwidth in TLB misses) and 2 MiB-aligned
// when large. Pages are committed on first write, so a long context costs memory only as it
// fills. Copies are deep.
class KvBuffer {
 public:
  KvBuffer() = default;
  explicit KvBuffer(size_t bytes);
  KvBuffer(const KvBuffer& other);
  KvBuffer& operator=(const KvBuffer& other);
  KvBuffer(KvBuffer&& other) noexcept { Swap(other); }
  KvBuffer& operator=(KvBuffer&& other) noexcept {
    Swap(other);
    return *this;
  }
  ~KvBuffer();

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Swap(KvBuffer& other) noexcept;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // the mapping (data_ rounded up to 2 MiB inside it)
  size_t map_bytes_ = 0;
};

// The cache element type for a model whose K projection is stored as `weights`.
inline DType KvCacheDType(DType weights) { return weights == DType::kF32 ? DType::kF32 : DType::kF16; }

struct KvLayer {
  int64_t capacity = 0;  // slots; 0 on KV-shared layers
  int kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kF32;  // kF32, kF16 or kBF16
  KvBuffer k, v;  // capacity · kv_heads · head_dim elements each

  int64_t Slot(int64_t pos) const { return pos % capacity; }
  size_t ElemBytes() const { return DTypeSize(dtype); }
  int64_t RowStride() const { return head_dim; }  // elements between consecutive slots of a head
  size_t Offset(int64_t pos, int head) const {
    return size_t((int64_t(head) * capacity + Slot(pos)) * head_dim) * ElemBytes();
  }
  void* K(int64_t pos, int head) { return k.data() + Offset(pos, head); }
  void* V(int64_t pos, int head) { return v.data() + Offset(pos, head); }
  const void* K(int64_t pos, int head) const { return k.data() + Offset(pos, head); }
  const void* V(int64_t pos, int head) const { return v.data() + Offset(pos, head); }

  // Stores one position's K and V rows of `head` (head_dim floats each), converted to the
  // cache's dtype (rounded to nearest even; f16 and fp8 saturate).
  void Write(int64_t pos, int head, const float* key, const float* value) {
    ConvertFromF32(dtype, key, head_dim, K(pos, head));
    ConvertFromF32(dtype, value, head_dim, V(pos, head));
  }

  // Positions [lo, hi] of `head` as at most two segments (the ring may wrap); returns the count.
  // The positions must still be in the ring: hi - lo < capacity.
  int Segments(int64_t lo, int64_t hi, int head, KvSegment out[2]) const {
    const int64_t first = Slot(lo), n = hi - lo + 1;
    const int64_t run = std::min(n, capacity - first);
    out[0] = {K(lo, head), V(lo, head), run, RowStride()};
    if (run == n) return 1;
    out[1] = {K(lo + run, head), V(lo + run, head), n - run, RowStride()};
    return 2;
  }
};

struct KvCache {
  std::vector<KvLayer> layers;
  int64_t max_tokens = 0;  // positions this cache can hold (the context limit)
  int64_t num_tokens = 0;  // positions already written

  void Clear() { num_tokens = 0; }
  uint64_t Bytes() const {
    uint64_t b = 0;
    for (const auto& l : layers) b += l.k.size() + l.v.size();
    return b;
  }
};

}  // namespace gk
