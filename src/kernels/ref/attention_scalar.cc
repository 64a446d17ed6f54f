// Scalar reference of AttendHeadsPartial: the oracle the SIMD kernels are tested against, and
// the path of GEMMAKIT_ISA=scalar. Two passes per query head over the split (max of the
// scores, then exp-weighted sums), dot products and sums in double.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"

namespace gk {
namespace {

inline float KvAt(const void* row, int64_t i, DType dt) {
  switch (dt) {
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(row)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(row)[i]);
    case DType::kFp8E4m3: return Fp8E4m3ToF32(static_cast<const uint8_t*>(row)[i]);
    case DType::kFp8E5m2: return Fp8E5m2ToF32(static_cast<const uint8_t*>(row)[i]);
    default: return static_cast<const float*>(row)[i];
  }
}

inline const void* RowAt(const void* base, int64_t index, int64_t stride, DType dt) {
  return static_cast<const char*>(base) + index * stride * int64_t(DTypeSize(dt));
}

// Calls fn(k_row, v_row) for positions [begin, end) of the concatenated segments.
template <class Fn>
void ForEachPosition(std::span<const KvSegment> segments, int64_t begin, int64_t end, DType dt, Fn&& fn) {
  int64_t base = 0;
  for (const KvSegment& s : segments) {
    const int64_t lo = std::max(begin, base) - base, hi = std::min(end, base + s.len) - base;
    for (int64_t j = lo; j < hi; ++j) fn(RowAt(s.k, j, s.stride, dt), RowAt(s.v, j, s.stride, dt));
    base += s.len;
  }
}

}  // namespace

void AttendHeadsPartialScalar(const AttentionQuery& q, std::span<const KvSegment> segments,
                              int64_t begin, int64_t end, const AttentionPartial& part) {
  const int64_t H = q.head_dim;
  const DType dt = q.kv_dtype;
  for (int g = 0; g < q.group; ++g) {
    const float* qv = q.q + g * q.q_stride;
    auto score = [&](const void* k) {
      double s = 0;
      for (int64_t i = 0; i < H; ++i) s += double(qv[i]) * KvAt(k, i, dt);
      return s * q.scale;
    };
    double m = -INFINITY;
    ForEachPosition(segments, begin, end, dt, [&](const void* k, const void*) { m = std::max(m, score(k)); });
    m = double(float(m));  // the state keeps a float max; weights are relative to that value
    float* o = part.o + g * part.o_stride;
    std::memset(o, 0, sizeof(float) * size_t(H));
    double l = 0;
    if (m != -INFINITY) {
      ForEachPosition(segments, begin, end, dt, [&](const void* k, const void* v) {
        const double p = std::exp(score(k) - m);
        l += p;
        for (int64_t i = 0; i < H; ++i) o[i] = float(o[i] + p * KvAt(v, i, dt));
      });
    }
    part.m[g] = float(m);
    part.l[g] = float(l);
  }
}

}  // namespace gk
