#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/isa.h"

namespace gk {
namespace {

// A ring-buffer-like cache of one layer: `slots` slots × kv_heads heads × H, positions
// 0..n-1 stored from slot `first` on (wrapping), exposed for head `head` as segments that are
// additionally cut at `cuts` (as a paged cache would).
struct FakeCache {
  int64_t slots, kv_heads, H;
  DType dtype;
  std::vector<float> raw;  // the elements in `dtype` (the vector only provides aligned bytes)

  FakeCache(int64_t slots_, int64_t kv_heads_, int64_t H_, DType dt, std::mt19937& rng)
      : slots(slots_), kv_heads(kv_heads_), H(H_), dtype(dt) {
    std::normal_distribution<float> nd;
    const size_t n = size_t(2 * slots * kv_heads * H);  // K then V
    std::vector<float> f32(n);
    for (float& x : f32) x = nd(rng);
    raw.resize((n * DTypeSize(dt) + 3) / 4);
    ConvertFromF32(dt, f32.data(), int64_t(n), raw.data());
  }
  const void* Row(bool v, int64_t slot, int64_t head) const {
    const size_t i = size_t(((v ? slots : 0) + slot) * kv_heads * H + head * H);
    return reinterpret_cast<const char*>(raw.data()) + i * DTypeSize(dtype);
  }
  std::vector<KvSegment> Segments(int64_t n, int64_t first, int64_t head, const std::vector<int64_t>& cuts) const {
    std::vector<KvSegment> segs;
    int64_t pos = 0;
    while (pos < n) {
      const int64_t slot = (first + pos) % slots;
      int64_t len = std::min(n - pos, slots - slot);
      for (int64_t c : cuts) {
        if (c > pos && c < pos + len) len = c - pos;
      }
      segs.push_back({Row(false, slot, head), Row(true, slot, head), len, kv_heads * H});
      pos += len;
    }
    return segs;
  }
};

struct Case {
  int H, group;
  int64_t n;
};

class AttentionTest : public ::testing::TestWithParam<std::tuple<Case, DType, Isa>> {};

std::vector<float> Reference(const AttentionQuery& q, const std::vector<KvSegment>& segs, int64_t n) {
  std::vector<float> m(size_t(q.group)), l(size_t(q.group)), o(size_t(q.group * q.head_dim));
  AttendHeadsPartialScalar(q, segs, 0, n, {m.data(), l.data(), o.data(), q.head_dim});
  for (int g = 0; g < q.group; ++g) {
    for (int i = 0; i < q.head_dim; ++i) o[size_t(g * q.head_dim + i)] /= l[size_t(g)];
  }
  return o;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5f + 2e-5f * std::fabs(want[i])) << what << " element " << i;
  }
}

// Every path (whole range, and split into partial states merged afterwards) against the
// scalar reference, with the positions cut into segments at odd places.
TEST_P(AttentionTest, MatchesScalarReference) {
  const auto [c, dtype, isa] = GetParam();
  if (int(isa) > int(BestSupportedIsa())) GTEST_SKIP() << "CPU lacks " << IsaName(isa);
  std::mt19937 rng(uint32_t(c.H * 7919 + c.group * 31 + c.n));
  const int64_t kv_heads = 2, slots = c.n + 37;
  FakeCache cache(slots, kv_heads, c.H, dtype, rng);
  // Queries scaled so scores spread over a few units, as trained q/k norms give.
  std::normal_distribution<float> nd(0.f, 3.f / std::sqrt(float(c.H)));
  const int64_t q_stride = c.H + 16;  // rows not packed: the stride is honoured
  std::vector<float> qbuf(size_t(c.group * q_stride));
  for (auto& x : qbuf) x = nd(rng);
  AttentionQuery q{qbuf.data(), q_stride, c.group, c.H, 0.75f, dtype};

  const int64_t first = (c.n * 5) % slots;
  const std::vector<int64_t> cuts = {1, c.n / 3, c.n / 3 + 17, c.n - 2};
  const std::vector<KvSegment> segs = cache.Segments(c.n, first, 1, cuts);
  const std::vector<float> want = Reference(q, segs, c.n);

  SetActiveIsa(isa);
  std::vector<float> got(size_t(c.group * c.H), NAN);
  AttendHeads(q, segs, got.data(), c.H);
  ExpectClose(got, want, "whole");

  // Splits at uneven points, one of them empty.
  const std::vector<int64_t> bounds = {0, c.n / 5, c.n / 5, c.n / 2 + 3 > c.n ? c.n : c.n / 2 + 3, c.n};
  const int splits = int(bounds.size()) - 1;
  std::vector<float> m(size_t(splits * c.group)), l(m.size()), o(m.size() * size_t(c.H));
  for (int s = 0; s < splits; ++s) {
    AttendHeadsPartial(q, segs, bounds[size_t(s)], bounds[size_t(s) + 1],
                       {m.data() + s * c.group, l.data() + s * c.group, o.data() + s * c.group * c.H, c.H});
  }
  std::vector<float> merged(size_t(c.group * c.H), NAN);
  MergeAttendPartials(m.data(), l.data(), o.data(), splits, c.group, c.H, merged.data(), c.H);
  SetActiveIsa(BestSupportedIsa());
  ExpectClose(merged, want, "split");
}

// Test names like H512_g8_n2000_F8_E4M3_avx2.
std::string ParamName(const ::testing::TestParamInfo<std::tuple<Case, DType, Isa>>& info) {
  const Case c = std::get<0>(info.param);
  return "H" + std::to_string(c.H) + "_g" + std::to_string(c.group) + "_n" + std::to_string(c.n) + "_" +
         std::string(DTypeName(std::get<1>(info.param))) + "_" + std::string(IsaName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Combine(::testing::Values(Case{32, 1, 1}, Case{32, 3, 70}, Case{256, 1, 2}, Case{256, 2, 1000},
                                         Case{256, 8, 129}, Case{512, 8, 2000}, Case{512, 2, 63},
                                         Case{512, 1, 700}, Case{48, 5, 333}, Case{64, 16, 100},
                                         Case{128, 4, 1500}, Case{512, 7, 65}, Case{40, 3, 50}),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16, DType::kFp8E4m3,
                                         DType::kFp8E5m2),
                       ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)),
    ParamName);

// Every finite FP8 code in K and V rows, through each ISA's widening, against the scalar
// reference (which decodes with Fp8E4m3ToF32 / Fp8E5m2ToF32 and sums in double). Row j holds
// the codes rotated by j, so each code meets every lane position of the SIMD loads.
TEST(Attention, AllFp8CodesMatchReference) {
  for (DType dtype : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    const bool e4 = dtype == DType::kFp8E4m3;
    std::vector<uint8_t> codes;
    for (int c = 0; c < 256; ++c) {
      const float x = e4 ? Fp8E4m3ToF32(uint8_t(c)) : Fp8E5m2ToF32(uint8_t(c));
      if (std::isfinite(x)) codes.push_back(uint8_t(c));  // saturating writes store no NaN or inf
    }
    const int H = 256, group = 3, n = 150;
    const float max_abs = e4 ? 448.f : 57344.f;
    while (codes.size() < size_t(H)) codes.push_back(0);
    std::vector<uint8_t> k(size_t(n * H)), v(size_t(n * H));
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < H; ++i) {
        k[size_t(j * H + i)] = codes[size_t((i + j) % H)];
        v[size_t(j * H + i)] = codes[size_t((i + 3 * j + 1) % H)];
      }
    }
    // Three segments; queries small enough that scores stay within a few units.
    const std::vector<KvSegment> segs = {{k.data(), v.data(), 40, H},
                                         {k.data() + 40 * H, v.data() + 40 * H, 1, H},
                                         {k.data() + 41 * H, v.data() + 41 * H, n - 41, H}};
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 0.5f / max_abs);
    std::vector<float> qbuf(size_t(group * H));
    for (auto& x : qbuf) x = nd(rng);
    const AttentionQuery q{qbuf.data(), H, group, H, 1.f, dtype};
    const std::vector<float> want = Reference(q, segs, n);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (int(isa) > int(BestSupportedIsa())) continue;
      SetActiveIsa(isa);
      std::vector<float> got(want.size(), NAN);
      AttendHeads(q, segs, got.data(), H);
      SetActiveIsa(BestSupportedIsa());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f * max_abs) << DTypeName(dtype) << " " << IsaName(isa) << " element " << i;
      }
    }
  }
}

// One position: the output is its V row exactly, whatever the FP8 code (the E4M3 path's
// ×256 is folded out of the inner loop and must come back exactly).
TEST(Attention, Fp8OnePositionReturnsDecodedValue) {
  for (DType dtype : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    const int H = 256;
    std::vector<uint8_t> k(static_cast<size_t>(H)), v(static_cast<size_t>(H));
    std::vector<float> q(size_t(2 * H), 0.01f);
    for (int i = 0; i < H; ++i) {
      k[size_t(i)] = uint8_t(0x38);
      v[size_t(i)] = uint8_t(i);
      const float x = dtype == DType::kFp8E4m3 ? Fp8E4m3ToF32(uint8_t(i)) : Fp8E5m2ToF32(uint8_t(i));
      if (!std::isfinite(x)) v[size_t(i)] = 0;
    }
    const KvSegment seg{k.data(), v.data(), 1, H};
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (int(isa) > int(BestSupportedIsa())) continue;
      SetActiveIsa(isa);
      std::vector<float> out(size_t(2 * H), NAN);
      AttendHeads({q.data(), H, 2, H, 1.f, dtype}, {&seg, 1}, out.data(), H);
      SetActiveIsa(BestSupportedIsa());
      for (int i = 0; i < 2 * H; ++i) {
        const uint8_t c = v[size_t(i % H)];
        const float want = dtype == DType::kFp8E4m3 ? Fp8E4m3ToF32(c) : Fp8E5m2ToF32(c);
        ASSERT_EQ(out[size_t(i)], want) << DTypeName(dtype) << " " << IsaName(isa) << " code " << int(c);
      }
    }
  }
}

// The parallel driver: decode-like task counts (split across threads and merged) and
// prefill-like ones (whole tasks), each task on its own KV head with its own length.
TEST(Attention, AttendTasksMatchesReference) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t tasks : {1, 2, 3, 13}) {
      std::mt19937 rng(uint32_t(threads * 100 + tasks));
      const int H = 256, group = 4;
      const int64_t n_max = 1500, slots = n_max + 5;
      FakeCache cache(slots, tasks, H, DType::kBF16, rng);
      std::normal_distribution<float> nd(0.f, 3.f / std::sqrt(float(H)));
      std::vector<float> qbuf(size_t(tasks * group * H));
      for (auto& x : qbuf) x = nd(rng);
      std::vector<std::vector<KvSegment>> segs;
      std::vector<float> want;
      for (int64_t i = 0; i < tasks; ++i) {
        const int64_t n = n_max - 97 * i;
        segs.push_back(cache.Segments(n, (i * 331) % slots, i, {}));
        const std::vector<float> w =
            Reference({qbuf.data() + i * group * H, H, group, H, 1.f, DType::kBF16}, segs.back(), n);
        want.insert(want.end(), w.begin(), w.end());
      }
      std::vector<float> got(want.size(), NAN);
      AttendTasks(
          tasks,
          [&](int64_t i, AttentionTask& t) {
            t.query = {qbuf.data() + i * group * H, H, group, H, 1.f, DType::kBF16};
            t.segments = segs[size_t(i)];
            t.out = got.data() + i * group * H;
            t.out_stride = H;
          },
          pool);
      ExpectClose(got, want, "threads " + std::to_string(threads) + " tasks " + std::to_string(tasks));
    }
  }
}

// A single position: the output is that position's V row whatever the scores.
TEST(Attention, OnePositionReturnsItsValue) {
  std::vector<float> k(64, 1.f), v(64), q(64 * 2, 100.f);
  for (int i = 0; i < 64; ++i) v[size_t(i)] = float(i);
  const KvSegment seg{k.data(), v.data(), 1, 64};
  std::vector<float> out(128);
  AttendHeads({q.data(), 64, 2, 64, 1.f, DType::kF32}, {&seg, 1}, out.data(), 64);
  for (int i = 0; i < 128; ++i) EXPECT_FLOAT_EQ(out[size_t(i)], float(i % 64));
}

// Large score gaps: the max-subtracted softmax neither overflows nor loses the winner.
TEST(Attention, HugeScoresStayFinite) {
  const int H = 32, n = 200;
  std::vector<float> k(size_t(n * H)), v(size_t(n * H)), q(H, 1.f);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < H; ++i) {
      k[size_t(j * H + i)] = j == 150 ? 10.f : float(j % 7) * 0.1f;
      v[size_t(j * H + i)] = float(j);
    }
  }
  const KvSegment seg{k.data(), v.data(), n, H};
  std::vector<float> out(H);
  AttendHeads({q.data(), H, 1, H, 1.f, DType::kF32}, {&seg, 1}, out.data(), H);
  for (int i = 0; i < H; ++i) EXPECT_NEAR(out[size_t(i)], 150.f, 1e-3f);
}

}  // namespace
}  // namespace gk
