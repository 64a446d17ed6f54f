#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/isa.h"

namespace gk {
namespace {

using PartialFn = void (*)(const AttentionQuery&, std::span<const KvSegment>, int64_t, int64_t,
                           const AttentionPartial&);

PartialFn ActivePartialFn() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return &AttendHeadsPartialAvx512;
    case Isa::kAvx2: return &AttendHeadsPartialAvx2;
    case Isa::kScalar: break;
  }
  return &AttendHeadsPartialScalar;
}

}  // namespace

void AttendHeadsPartial(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin,
                        int64_t end, const AttentionPartial& part) {
  ActivePartialFn()(q, segments, begin, end, part);
}

namespace {

int64_t Positions(std::span<const KvSegment> segments) {
  int64_t n = 0;
  for (const KvSegment& s : segments) n += s.len;
  return n;
}

// AttendHeads over positions [begin, end) of the concatenated segments.
void AttendRange(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin, int64_t end,
                 float* out, int64_t out_stride) {
  const PartialFn fn = ActivePartialFn();
  constexpr int kHeads = 64;  // heads per pass (the m/l state lives on the stack)
  float m[kHeads], l[kHeads];
  for (int g0 = 0; g0 < q.group; g0 += kHeads) {
    AttentionQuery sub = q;
    sub.q = q.q + g0 * q.q_stride;
    sub.group = std::min(kHeads, q.group - g0);
    float* o = out + g0 * out_stride;
    fn(sub, segments, begin, end, AttentionPartial{m, l, o, out_stride});
    for (int g = 0; g < sub.group; ++g) {
      const float inv = 1.f / l[g];
      float* row = o + g * out_stride;
      for (int i = 0; i < q.head_dim; ++i) row[i] *= inv;
    }
  }
}

}  // namespace

void AttendHeads(const AttentionQuery& q, std::span<const KvSegment> segments, float* out,
                 int64_t out_stride) {
  AttendRange(q, segments, 0, Positions(segments), out, out_stride);
}

void MergeAttendPartials(const float* m, const float* l, const float* o, int splits, int group,
                         int head_dim, float* out, int64_t out_stride) {
  for (int g = 0; g < group; ++g) {
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = std::max(mx, m[s * group + g]);
    float* row = out + g * out_stride;
    for (int i = 0; i < head_dim; ++i) row[i] = 0.f;
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float ms = m[s * group + g];
      if (ms == -INFINITY) continue;  // empty split
      const float w = std::exp(ms - mx);
      sum += w * l[s * group + g];
      const float* os = o + (int64_t(s) * group + g) * head_dim;
      for (int i = 0; i < head_dim; ++i) row[i] += w * os[i];
    }
    const float inv = 1.f / sum;
    for (int i = 0; i < head_dim; ++i) row[i] *= inv;
  }
}

namespace {

constexpr int64_t kMinSplitPositions = 256;
constexpr int64_t kPartialFloats = 32768;  // 128 KiB of partial states on the stack
constexpr int64_t kMaxSplitTasks = 64;

// The task's positions [begin, end) of its concatenated segments.
std::pair<int64_t, int64_t> TaskRange(const AttentionTask& t) {
  return {t.begin, t.end < 0 ? Positions(t.segments) : t.end};
}

}  // namespace

void AttendTasks(int64_t tasks, const AttentionTaskFn& describe, ThreadPool& pool) {
  if (tasks <= 0) return;
  const int64_t threads = pool.size();
  int64_t splits = 1;
  if (tasks < 4 * threads && tasks <= kMaxSplitTasks) {
    int64_t longest = 0, floats = 0;
    for (int64_t i = 0; i < tasks; ++i) {
      AttentionTask t;
      describe(i, t);
      const auto [begin, end] = TaskRange(t);
      longest = std::max(longest, end - begin);
      floats += int64_t(t.query.group) * (t.query.head_dim + 2);
    }
    splits = std::min((4 * threads + tasks - 1) / tasks, longest / kMinSplitPositions);
    splits = std::max<int64_t>(1, std::min(splits, kPartialFloats / floats));
  }
  // The loop bodies capture one pointer, so their std::function needs no heap allocation.
  if (splits == 1) {
    const AttentionTaskFn* fn = &describe;
    pool.ParallelForDynamic(tasks, std::max<int64_t>(1, tasks / (4 * threads)), [fn](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        AttentionTask t;
        (*fn)(i, t);
        const auto [begin, end] = TaskRange(t);
        AttendRange(t.query, t.segments, begin, end, t.out, t.out_stride);
      }
    });
    return;
  }

  // Partial states of task i, split s, in one stack buffer: task i's region starts at
  // base[i] floats and holds, per split, group outputs, then group maxima, then group sums.
  struct Splits {
    const AttentionTaskFn* describe;
    int64_t splits;
    int64_t base[kMaxSplitTasks];
    alignas(64) float partial[kPartialFloats];
  } ctx;
  ctx.describe = &describe;
  ctx.splits = splits;
  int64_t used = 0;
  for (int64_t i = 0; i < tasks; ++i) {
    AttentionTask t;
    describe(i, t);
    ctx.base[i] = used;
    used += splits * int64_t(t.query.group) * (t.query.head_dim + 2);
  }
  Splits* c = &ctx;
  pool.ParallelForDynamic(tasks * splits, 1, [c](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t task = i / c->splits, s = i % c->splits;
      AttentionTask t;
      (*c->describe)(task, t);
      const auto [begin, end] = TaskRange(t);
      const int64_t G = t.query.group, H = t.query.head_dim, n = end - begin;
      float* o = c->partial + c->base[task];
      float* m = o + c->splits * G * H;
      float* l = m + c->splits * G;
      AttendHeadsPartial(t.query, t.segments, begin + n * s / c->splits, begin + n * (s + 1) / c->splits,
                         AttentionPartial{m + s * G, l + s * G, o + s * G * H, H});
    }
  });
  for (int64_t task = 0; task < tasks; ++task) {
    AttentionTask t;
    describe(task, t);
    const int64_t G = t.query.group, H = t.query.head_dim;
    const float* o = ctx.partial + ctx.base[task];
    const float* m = o + splits * G * H;
    const float* l = m + splits * G;
    MergeAttendPartials(m, l, o, int(splits), int(G), int(H), t.out, t.out_stride);
  }
}

}  // namespace gk
