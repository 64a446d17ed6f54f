// Attention of a group of query heads over one KV head's cached positions (decode and prefill).
//
// Data: the keys/values of one KV head over the visible positions come as a list of segments,
// each a run of positions whose K rows (and V rows) are `stride` elements apart. A ring buffer
// gives at most two segments, a paged cache one per block; the kernel never sees slots.
// K/V rows are f32, f16, bf16 or fp8 (E4M3, E5M2), widened to f32 in registers; queries,
// scores, softmax and the output are f32.
//
// GQA: the `group` query heads that share a KV head are processed together, so each K and V
// row is read from memory once per group, not once per query head.
//
// Blocking (the SIMD kernels): positions go in blocks of 64 with an online ("flash")
// softmax: per block, scores for all heads of the group (a register tile of up to 24
// heads × positions accumulators over the head dim, reduced with a transposed tree), the
// running max / sum / output are rescaled when the max rises, then p·V accumulates into the
// output rows (heads × a few 16-wide column slices in registers for the whole block). While
// a score tile runs, its V rows and the K rows 8 positions ahead are prefetched a line at a
// time, and the next block's K rows while p·V runs, so one core keeps the KV stream going.
// Softmax is exact (max-subtracted), every sum is f32.
//
// Splits (flash-decoding): AttendHeadsPartial covers positions [begin, end) of the
// concatenated segments and leaves the unnormalised state (max m, sum l, output o); the caller
// runs splits on different threads and MergeAttendPartials combines them. A decode step with
// few KV heads thus spreads one long cache over all cores.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "tensor/dtype.h"
#include "tensor/thread_pool.h"

namespace gk {

// A run of consecutive visible positions of one KV head.
struct KvSegment {
  const void* k = nullptr;  // K row of the segment's first position (kv_dtype elements)
  const void* v = nullptr;  // V row of the segment's first position
  int64_t len = 0;          // positions
  int64_t stride = 0;       // elements from one position's row to the next (K and V alike)
};

// The query heads of one KV head and how to read the cache.
struct AttentionQuery {
  const float* q = nullptr;  // group rows of head_dim floats, row g at q + g * q_stride
  int64_t q_stride = 0;
  int group = 1;             // query heads sharing the KV head (any count; 1..8 per pass)
  int head_dim = 0;          // any; multiples of 16 (Gemma: 256, 512) take the SIMD path
  float scale = 1.f;         // scores = scale · q·k (1 on Gemma 4)
  DType kv_dtype = DType::kF32;  // kF32, kF16, kBF16, kFp8E4m3 or kFp8E5m2
};

// Softmax state of one split, per query head g: running max m[g], sum of exp l[g] (relative
// to m[g]) and unnormalised output row o + g * o_stride (head_dim floats).
// An empty split leaves m = -inf, l = 0, o = 0.
struct AttentionPartial {
  float* m = nullptr;
  float* l = nullptr;
  float* o = nullptr;
  int64_t o_stride = 0;
};

// Softmax(scale · q·kᵀ)·V over every position of the segments into out rows
// (out + g * out_stride). At least one position. Single-threaded.
void AttendHeads(const AttentionQuery& q, std::span<const KvSegment> segments, float* out,
                 int64_t out_stride);

// Positions [begin, end) of the concatenated segments, unnormalised. Single-threaded.
void AttendHeadsPartial(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin,
                        int64_t end, const AttentionPartial& part);

// Combines `splits` partial states of the same query heads (split s: m at m + s * group,
// l at l + s * group, o row g at o + (s * group + g) * head_dim) into normalised out rows.
void MergeAttendPartials(const float* m, const float* l, const float* o, int splits, int group,
                         int head_dim, float* out, int64_t out_stride);

// One unit of parallel attention work: a group of query heads over one KV head's positions.
// `segments` may point into `inline_segments` (ring buffers need at most two); a task is then
// only valid where it was filled in (do not copy it). [begin, end) selects positions of the
// concatenated segments (end -1: through the last), so whole blocks of a paged cache can be
// passed when a token's window starts or ends inside one.
struct AttentionTask {
  AttentionQuery query;
  std::span<const KvSegment> segments;
  float* out = nullptr;  // group rows, row g at out + g * out_stride
  int64_t out_stride = 0;
  int64_t begin = 0;
  int64_t end = -1;
  KvSegment inline_segments[2];
};
// Fills in task `index`; called from any pool thread, possibly several times per task.
using AttentionTaskFn = std::function<void(int64_t index, AttentionTask& task)>;

// Runs tasks [0, tasks) on the pool, each over its [begin, end) positions (at least one).
// With at least 4 tasks per thread (prefill, batches, many KV heads) each task runs whole on
// one thread (chunks claimed dynamically). With fewer (a decode step with few KV heads) long
// tasks are cut into splits of at least 256 positions so that every thread streams part of
// the cache; the splits' partial states live on the caller's stack (128 KiB at most; fewer
// splits when they would not fit) and are merged on the calling thread. Allocates nothing.
void AttendTasks(int64_t tasks, const AttentionTaskFn& describe, ThreadPool& pool);

// Per-ISA kernels of AttendHeadsPartial, same contract (tests compare them).
void AttendHeadsPartialScalar(const AttentionQuery& q, std::span<const KvSegment> segments,
                              int64_t begin, int64_t end, const AttentionPartial& part);
void AttendHeadsPartialAvx2(const AttentionQuery& q, std::span<const KvSegment> segments,
                            int64_t begin, int64_t end, const AttentionPartial& part);
void AttendHeadsPartialAvx512(const AttentionQuery& q, std::span<const KvSegment> segments,
                              int64_t begin, int64_t end, const AttentionPartial& part);

}  // namespace gk
