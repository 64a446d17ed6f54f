// The GPU's decoder ops against the CPU's (kernels/ops.h, tensor/dtype.h): fresh random inputs,
// outputs poisoned first. Label cuda: skipped without a GPU.
#include "kernels/cuda/decoder_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

// One element of a KV pool in its dtype, widened.
float PoolValue(DType dt, const std::vector<std::byte>& pool, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(pool.data());
  switch (dt) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::kF16: return F16ToF32(uint16_t(p[2 * i] | p[2 * i + 1] << 8));
    case DType::kBF16: return Bf16ToF32(uint16_t(p[2 * i] | p[2 * i + 1] << 8));
    case DType::kFp8E4m3: return Fp8E4m3ToF32(p[i]);
    default: return Fp8E5m2ToF32(p[i]);
  }
}

// q's norm and RoPE, K's norm and RoPE, V's norm and the paged write in one kernel
// (NormRopeAndKvWrite), against the CPU's RmsNormRows, ApplyRopeCosSin and ConvertFromF32: the
// f32 values within 1e-6, each narrower element the CPU's or its neighbour (the two sides' f32
// values may differ in the last bit, which can move a rounding), the slots no token names
// untouched. With a V projection, without one (K=V layers: V is raw K), with V's norm (Gemma 4)
// and without; V stored as it comes is the CPU's bytes exactly, in every dtype, saturation
// included (values past f16's and the fp8 formats' ranges). Each from q, k and v apart and from
// the columns of one q|k|v product (rows (N + 2K)·H apart), which must stay as they were; q
// alone (a layer reading another's KV) in place and from the product's columns.
TEST(CudaDecoderOps, FusedNormRopeAndKvWriteMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int T = 5, N = 4, K = 2, H = 128, bs = 4, blocks = 6;
  std::vector<float> inv(size_t(H / 2));
  for (int i = 0; i < H / 4; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e4, 2.0 * double(i) / double(H)));
  const std::vector<int32_t> pos = {0, 5, 6, 11, 3};
  const std::vector<int32_t> offset = {0, 0, 0, 0, 3};
  const std::vector<int32_t> tables = {4, 1, 2, 5, 0, 3};
  std::vector<float> cos_sin(size_t(T * H));
  for (int t = 0; t < T; ++t) RopeCosSin(inv.data(), H / 2, pos[size_t(t)], cos_sin.data() + t * H);
  auto dcs = DeviceBuffer<float>::From(cos_sin);
  auto dpos = DeviceBuffer<int32_t>::From(pos);
  auto doff = DeviceBuffer<int32_t>::From(offset);
  auto dtab = DeviceBuffer<int32_t>::From(tables);
  ASSERT_TRUE(dcs.ok() && dpos.ok() && doff.ok() && dtab.ok());
  const PagedTokens tokens{dpos->data(), doff->data(), dtab->data()};

  const auto q = Random(size_t(T * N * H), rng, 3.f), q_norm = Random(size_t(H), rng);
  const auto k = Random(size_t(T * K * H), rng, 3.f);
  auto v = Random(size_t(T * K * H), rng, 3.f);
  v[7] = 70000.f;
  v[9] = -1e6f;
  const int64_t W = (N + 2 * K) * H;  // a q|k|v product's row
  std::vector<float> qkv;
  for (int t = 0; t < T; ++t) {
    for (const std::vector<float>* part : {&q, &k, &std::as_const(v)}) {
      const int64_t n = int64_t(part->size()) / T;
      qkv.insert(qkv.end(), part->begin() + t * n, part->begin() + (t + 1) * n);
    }
  }
  auto dqkv = DeviceBuffer<float>::From(qkv);
  ASSERT_TRUE(dqkv.ok());

  std::vector<float> want_q(q.size());
  gk::RmsNormRows(q.data(), q_norm.data(), T * N, H, 1e-6f, want_q.data());
  for (int t = 0; t < T; ++t) ApplyRopeCosSin(want_q.data() + t * N * H, N, H, cos_sin.data() + t * H);
  auto dq = DeviceBuffer<float>::From(q);
  auto dqn = DeviceBuffer<float>::From(q_norm);
  auto dq_out = DeviceBuffer<float>::From(std::vector<float>(q.size(), -7.f));
  ASSERT_TRUE(dq.ok() && dqn.ok() && dq_out.ok());
  QkvNormWrite only_q;
  only_q.T = T;
  only_q.H = H;
  only_q.cos_sin = dcs->data();
  only_q.heads = N;
  only_q.q = dq->data();
  only_q.q_ld = N * H;
  only_q.q_out = dq->data();
  only_q.q_norm = dqn->data();
  ASSERT_TRUE(NormRopeAndKvWrite(only_q, 0).ok());
  EXPECT_LT(RelErr(*dq->ToHost(), want_q), 1e-6);
  only_q.q = dqkv->data();
  only_q.q_ld = W;
  only_q.q_out = dq_out->data();
  ASSERT_TRUE(NormRopeAndKvWrite(only_q, 0).ok());
  EXPECT_LT(RelErr(*dq_out->ToHost(), want_q), 1e-6);
  EXPECT_EQ(*dqkv->ToHost(), qkv);
  QkvNormWrite bad = only_q;
  bad.q_out = dqkv->data();  // in place, but rows W apart
  EXPECT_FALSE(NormRopeAndKvWrite(bad, 0).ok());
  bad = only_q;
  bad.q_ld = N * H - 1;
  EXPECT_FALSE(NormRopeAndKvWrite(bad, 0).ok());

  const auto k_norm = Random(size_t(H), rng);
  auto dk = DeviceBuffer<float>::From(k);
  auto dv = DeviceBuffer<float>::From(v);
  auto dkn = DeviceBuffer<float>::From(k_norm);
  ASSERT_TRUE(dk.ok() && dv.ok() && dkn.ok());
  // (q, k, v, row strides): apart, or columns of the q|k|v rows.
  auto dq_in = DeviceBuffer<float>::From(q);
  ASSERT_TRUE(dq_in.ok());
  const std::vector<std::tuple<const float*, const float*, const float*, int64_t, int64_t>> layouts = {
      {dq_in->data(), dk->data(), dv->data(), N * H, K * H},
      {dqkv->data(), dqkv->data() + N * H, dqkv->data() + (N + K) * H, W, W}};
  std::vector<float> want_k(k.size());
  gk::RmsNormRows(k.data(), k_norm.data(), T * K, H, 1e-6f, want_k.data());
  for (int t = 0; t < T; ++t) ApplyRopeCosSin(want_k.data() + t * K * H, K, H, cos_sin.data() + t * H);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4m3, DType::kFp8E5m2}) {
    for (const auto& [with_v, v_norm] : std::vector<std::pair<bool, bool>>{{true, true}, {false, true}, {true, false}}) {
      for (const auto& [q_in, k_in, v_in, q_ld, kv_ld] : layouts) {
        const std::string what = StrCat(DTypeName(dt), with_v ? " with V" : " K=V", v_norm ? ", V normed" : "",
                                        kv_ld == W ? ", q|k|v rows" : "");
        std::vector<float> want_v = with_v ? v : k;
        if (v_norm) gk::RmsNormRows(want_v.data(), nullptr, T * K, H, 1e-6f, want_v.data());
        const size_t elem = DTypeSize(dt), bytes = size_t(blocks * K * bs * H) * elem;
        std::vector<std::byte> want_kp(bytes, std::byte{0x5a}), want_vp(bytes, std::byte{0x5a});
        std::vector<char> written(bytes / elem, 0);
        for (int t = 0; t < T; ++t) {
          const int32_t block = tables[size_t(offset[size_t(t)] + pos[size_t(t)] / bs)];
          for (int h = 0; h < K; ++h) {
            const size_t row = size_t(((block * K + h) * bs + pos[size_t(t)] % bs) * H);
            ConvertFromF32(dt, want_k.data() + (t * K + h) * H, H, want_kp.data() + row * elem);
            ConvertFromF32(dt, want_v.data() + (t * K + h) * H, H, want_vp.data() + row * elem);
            std::fill(written.begin() + int64_t(row), written.begin() + int64_t(row) + H, 1);
          }
        }
        auto pk = DeviceBuffer<std::byte>::From(std::vector<std::byte>(bytes, std::byte{0x5a}));
        auto pv = DeviceBuffer<std::byte>::From(std::vector<std::byte>(bytes, std::byte{0x5a}));
        ASSERT_TRUE(pk.ok() && pv.ok());
        auto fresh_q = DeviceBuffer<float>::From(std::vector<float>(q.size(), -7.f));
        ASSERT_TRUE(fresh_q.ok());
        QkvNormWrite a = only_q;
        a.q = q_in;
        a.q_ld = q_ld;
        a.q_out = fresh_q->data();
        a.kv_heads = K;
        a.k = k_in;
        a.v = with_v ? v_in : nullptr;
        a.kv_ld = kv_ld;
        a.k_norm = dkn->data();
        a.v_norm = v_norm;
        a.tokens = tokens;
        a.block_size = bs;
        a.dtype = dt;
        a.k_pool = pk->data();
        a.v_pool = pv->data();
        const Status st = NormRopeAndKvWrite(a, 0);
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_LT(RelErr(*fresh_q->ToHost(), want_q), 1e-6) << what;
        for (const auto& [got, want, name] :
             {std::tuple{*pk->ToHost(), want_kp, "K"}, std::tuple{*pv->ToHost(), want_vp, "V"}}) {
          for (size_t i = 0; i < written.size(); ++i) {
            if (!written[i]) {
              ASSERT_EQ(std::memcmp(got.data() + i * elem, want.data() + i * elem, elem), 0)
                  << what << " " << name << " slot " << i;
              continue;
            }
            const float g = PoolValue(dt, got, i), e = PoolValue(dt, want, i);
            if (name == std::string("V") && with_v && !v_norm) {
              ASSERT_EQ(std::memcmp(got.data() + i * elem, want.data() + i * elem, elem), 0) << what << " V " << i;
            } else if (dt == DType::kF32) {
              ASSERT_NEAR(g, e, 1e-6f * 8.f) << what << " " << name << " " << i;
            } else if (g != e) {  // a neighbour: one step of the dtype's grid at that magnitude
              const int mantissa = dt == DType::kF16 ? 10 : dt == DType::kBF16 ? 7 : dt == DType::kFp8E4m3 ? 3 : 2;
              const float subnormal_step = dt == DType::kFp8E4m3 ? 0x1p-9f : dt == DType::kFp8E5m2 ? 0x1p-16f : 0x1p-24f;
              ASSERT_LE(std::fabs(g - e), std::ldexp(std::max(std::fabs(g), std::fabs(e)), -mantissa) + subnormal_step)
                  << what << " " << name << " " << i << ": " << g << " vs " << e;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(*dqkv->ToHost(), qkv);
  bad = only_q;
  bad.kv_heads = K;
  bad.k = dk->data();
  bad.kv_ld = K * H - 1;
  EXPECT_FALSE(NormRopeAndKvWrite(bad, 0).ok());
}

TEST(CudaDecoderOps, RopeNormAddGatherAndEmbedMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  // RoPE with a partial rotation (zero frequencies) at large positions.
  const int64_t T = 7, heads = 3, H = 512;
  std::vector<float> inv(size_t(H / 2));
  for (int64_t i = 0; i < H / 8; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e6, 2.0 * double(i) / double(H)));
  std::vector<float> cos_sin(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) RopeCosSin(inv.data(), H / 2, 1000 * t + 3, cos_sin.data() + t * H);
  auto x = Random(size_t(T * heads * H), rng);
  std::vector<float> want = x;
  for (int64_t t = 0; t < T; ++t) ApplyRopeCosSin(want.data() + t * heads * H, heads, H, cos_sin.data() + t * H);
  auto dx = DeviceBuffer<float>::From(x);
  auto dcs = DeviceBuffer<float>::From(cos_sin);
  ASSERT_TRUE(dx.ok() && dcs.ok());
  ASSERT_TRUE(RopeRows(dx->data(), T, heads, H, dcs->data(), 0).ok());
  EXPECT_LT(RelErr(*dx->ToHost(), want), 1e-6);

  // x += RMSNorm(y)·w.
  const int64_t rows = 9, D = 640;
  auto y = Random(size_t(rows * D), rng, 5.f), w = Random(size_t(D), rng), base = Random(size_t(rows * D), rng);
  std::vector<float> normed(y.size()), sum = base;
  gk::RmsNormRows(y.data(), w.data(), rows, D, 1e-6f, normed.data());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += normed[i];
  auto dy = DeviceBuffer<float>::From(y);
  auto dw = DeviceBuffer<float>::From(w);
  auto db = DeviceBuffer<float>::From(base);
  ASSERT_TRUE(dy.ok() && dw.ok() && db.ok());
  ASSERT_TRUE(RmsNormAddRows(dy->data(), dw->data(), rows, D, 1e-6f, db->data(), 0).ok());
  EXPECT_LT(RelErr(*db->ToHost(), sum), 1e-5);

  // Row gather, and an f32 embedding with a fallback row for ids past the table.
  const std::vector<int32_t> pick = {8, 0, 3};
  auto dout = DeviceBuffer<float>::From(Poison(pick.size() * size_t(D)));
  auto dpick = DeviceBuffer<int32_t>::From(pick);
  ASSERT_TRUE(dout.ok() && dpick.ok());
  ASSERT_TRUE(GatherRows(dy->data(), D, dpick->data(), int64_t(pick.size()), dout->data(), 0).ok());
  auto gathered = *dout->ToHost();
  for (size_t i = 0; i < pick.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(gathered.data() + i * size_t(D), y.data() + size_t(pick[i]) * size_t(D), sizeof(float) * size_t(D)));
  }
  const std::vector<int32_t> ids = {2, 8, 9, 100, -1};  // 9 and 100: past the 9-row table, so row 4
  auto demb = DeviceBuffer<float>::From(Poison(ids.size() * size_t(D)));
  auto dids = DeviceBuffer<int32_t>::From(ids);
  ASSERT_TRUE(demb.ok() && dids.ok());
  ASSERT_TRUE(EmbedRows(dy->data(), DType::kF32, rows, D, dids->data(), int64_t(ids.size()), 0.5f, 4, demb->data(), 0).ok());
  auto emb = *demb->ToHost();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t r = ids[i] >= rows ? 4 : ids[i];
    for (int64_t j = 0; j < D; ++j) {
      const float want_v = r < 0 ? 0.f : y[size_t(r * D + j)] * 0.5f;
      ASSERT_EQ(emb[i * size_t(D) + size_t(j)], want_v) << i << " " << j;
    }
  }
}

// The first of equal maxima, as the CPU's ArgMax: rows with ties planted far apart.
TEST(CudaDecoderOps, ArgMaxRowsPicksTheFirstLargest) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 6, n = 262144;
  auto x = Random(size_t(rows * n), rng);
  x[size_t(1 * n + 7)] = x[size_t(1 * n + 200000)] = 50.f;  // a tie: 7 wins
  x[size_t(2 * n + n - 1)] = 60.f;                         // the last column
  for (int64_t i = 0; i < n; ++i) x[size_t(3 * n + i)] = 1.f;  // all equal: 0
  auto dx = DeviceBuffer<float>::From(x);
  auto dout = DeviceBuffer<int32_t>::From(std::vector<int32_t>(size_t(rows), -1));
  ASSERT_TRUE(dx.ok() && dout.ok());
  ASSERT_TRUE(ArgMaxRows(dx->data(), rows, n, dout->data(), 0).ok());
  auto got = dout->ToHost();
  ASSERT_TRUE(got.ok());
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ((*got)[size_t(r)], ArgMax(x.data() + r * n, n)) << "row " << r;
  EXPECT_EQ((*got)[1], 7);
  EXPECT_EQ((*got)[2], n - 1);
  EXPECT_EQ((*got)[3], 0);
}

// The router's choices and weights, as GemmaModel::MoeBlock makes them: softmax, the k largest
// (lower index first among equal ones), renormalised, times per_expert_scale.
TEST(CudaDecoderOps, RouteTopKMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t T = 9;
  for (const auto& [E, k] : std::vector<std::pair<int, int>>{{128, 8}, {8, 2}, {300, 1}}) {
    auto logits = Random(size_t(T * E), rng, 2.f);
    logits[3] = logits[5] = 9.f;  // token 0: a tie for the top
    const auto scale = Random(size_t(E), rng);
    std::vector<int32_t> want_e;
    std::vector<float> want_w;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> p(logits.begin() + t * E, logits.begin() + (t + 1) * E);
      SoftmaxInPlace(p.data(), E);
      std::vector<int> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int z) { return p[size_t(a)] > p[size_t(z)] || (p[size_t(a)] == p[size_t(z)] && a < z); });
      float total = 0.f;
      for (int j = 0; j < k; ++j) total += p[size_t(order[size_t(j)])];
      for (int j = 0; j < k; ++j) {
        want_e.push_back(order[size_t(j)]);
        want_w.push_back(p[size_t(order[size_t(j)])] / total * scale[size_t(order[size_t(j)])]);
      }
    }
    auto dl = DeviceBuffer<float>::From(logits);
    auto ds = DeviceBuffer<float>::From(scale);
    auto de = DeviceBuffer<int32_t>::From(std::vector<int32_t>(size_t(T * k), -1));
    auto dw = DeviceBuffer<float>::From(Poison(size_t(T * k)));
    ASSERT_TRUE(dl.ok() && ds.ok() && de.ok() && dw.ok());
    ASSERT_TRUE(RouteTopK(dl->data(), T, E, k, ds->data(), de->data(), dw->data(), 0).ok());
    EXPECT_EQ(*de->ToHost(), want_e) << E << " experts, top " << k;
    EXPECT_LT(RelErr(*dw->ToHost(), want_w), 1e-5) << E << " experts, top " << k;
  }
}

}  // namespace
}  // namespace gk::cuda
