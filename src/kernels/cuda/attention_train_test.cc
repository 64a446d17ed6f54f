// The training attention's forward and backward passes against a double-precision reference
// written here from the definitions (softmax attention and its gradients), on a packed
// micro-batch whose rows end inside and across the tiles of queries. Label cuda: skipped
// without a GPU.
#include "kernels/cuda/attention_train.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cuda/cuda_test_util.h"

namespace gk::cuda {
namespace {

struct Shape {
  int N, K, H, window;
};

// out, lse (N, T), dq, dk, dv of softmax(scale·q·kᵀ, masked)·v and of Σ dout·out.
struct Reference {
  std::vector<float> out, lse, dq, dk, dv;
  Reference(const Shape& s, const std::vector<int32_t>& row_start, float scale, const std::vector<float>& q,
            const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout) {
    const int64_t T = int64_t(row_start.size()), N = s.N, K = s.K, H = s.H, g = N / K;
    out.assign(q.size(), 0.f);
    dq.assign(q.size(), 0.f);
    lse.assign(size_t(N * T), 0.f);
    std::vector<double> dk_acc(k.size(), 0.0), dv_acc(v.size(), 0.0);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t lo = s.window > 0 ? std::max<int64_t>(row_start[size_t(i)], i - s.window + 1) : row_start[size_t(i)];
      for (int64_t h = 0; h < N; ++h) {
        const int64_t kh = h / g;
        const float* qi = q.data() + (i * N + h) * H;
        std::vector<double> p(size_t(i - lo + 1));
        double m = -1e300;
        for (int64_t j = lo; j <= i; ++j) {
          double d = 0;
          for (int64_t c = 0; c < H; ++c) d += double(qi[c]) * k[size_t((j * K + kh) * H + c)];
          p[size_t(j - lo)] = d * scale;
          m = std::max(m, d * scale);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - m));
        for (double& x : p) x /= sum;
        lse[size_t(h * T + i)] = float(m + std::log(sum));
        std::vector<double> o(size_t(H), 0.0);
        for (int64_t j = lo; j <= i; ++j) {
          for (int64_t c = 0; c < H; ++c) o[size_t(c)] += p[size_t(j - lo)] * v[size_t((j * K + kh) * H + c)];
        }
        for (int64_t c = 0; c < H; ++c) out[size_t((i * N + h) * H + c)] = float(o[size_t(c)]);
        // Backward: dp_j = dout·v_j, ds_j = p_j (dp_j − Σ p dp), dq = scale Σ ds_j k_j,
        // dk_j += scale ds_j q, dv_j += p_j dout.
        const float* di = dout.data() + (i * N + h) * H;
        std::vector<double> dp(p.size());
        double pdp = 0;
        for (int64_t j = lo; j <= i; ++j) {
          double d = 0;
          for (int64_t c = 0; c < H; ++c) d += double(di[c]) * v[size_t((j * K + kh) * H + c)];
          dp[size_t(j - lo)] = d;
          pdp += p[size_t(j - lo)] * d;
        }
        for (int64_t j = lo; j <= i; ++j) {
          const double pj = p[size_t(j - lo)], ds = pj * (dp[size_t(j - lo)] - pdp);
          for (int64_t c = 0; c < H; ++c) {
            dq[size_t((i * N + h) * H + c)] += float(scale * ds * k[size_t((j * K + kh) * H + c)]);
            dk_acc[size_t((j * K + kh) * H + c)] += scale * ds * qi[c];
            dv_acc[size_t((j * K + kh) * H + c)] += pj * di[c];
          }
        }
      }
    }
    dk.assign(dk_acc.begin(), dk_acc.end());
    dv.assign(dv_acc.begin(), dv_acc.end());
  }
};

TEST(CudaTrainAttention, ForwardAndBackwardMatchTheDefinitions) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  GemmOnStream gs;
  const Status made = gs.Create();
  ASSERT_TRUE(made.ok()) << made.message();
  // Rows of 150, 300 and 71 tokens: 521 tokens, tiles of 256 queries; the last tile's 9 queries
  // over 71 keys make odd score matrices, which the rows' padding keeps 16-byte aligned per KV head.
  std::vector<int32_t> row_start;
  for (int len : {150, 300, 71}) {
    const int32_t first = int32_t(row_start.size());
    for (int t = 0; t < len; ++t) row_start.push_back(first);
  }
  const int64_t T = int64_t(row_start.size());
  auto d_rows = DeviceBuffer<int32_t>::From(row_start);
  ASSERT_TRUE(d_rows.ok());
  TrainAttention attention;
  for (const Shape& s : {Shape{8, 2, 64, 0}, Shape{4, 4, 256, 0}, Shape{6, 1, 32, 50}}) {
    const float scale = 0.125f;
    const auto q = Random(size_t(T * s.N * s.H), rng), k = Random(size_t(T * s.K * s.H), rng),
               v = Random(size_t(T * s.K * s.H), rng), dout = Random(q.size(), rng);
    const Reference want(s, row_start, scale, q, k, v, dout);
    auto d_q = DeviceBuffer<float>::From(q), d_k = DeviceBuffer<float>::From(k), d_v = DeviceBuffer<float>::From(v),
         d_dout = DeviceBuffer<float>::From(dout);
    ASSERT_TRUE(d_q.ok() && d_k.ok() && d_v.ok() && d_dout.ok());
    for (DType dt : {DType::kF32, DType::kBF16}) {
      auto d_out = DeviceBuffer<float>::From(Poison(q.size())), d_lse = DeviceBuffer<float>::From(Poison(size_t(s.N * T)));
      auto d_dq = DeviceBuffer<float>::From(Poison(q.size())), d_dk = DeviceBuffer<float>::From(Poison(k.size())),
           d_dv = DeviceBuffer<float>::From(Poison(v.size()));
      ASSERT_TRUE(d_out.ok() && d_lse.ok() && d_dq.ok() && d_dk.ok() && d_dv.ok());
      TrainAttentionArgs a;
      a.T = T;
      a.row_start = d_rows->data();
      a.host_row_start = row_start;
      a.num_heads = s.N;
      a.kv_heads = s.K;
      a.head_dim = s.H;
      a.scale = scale;
      a.window = s.window;
      a.dtype = dt;
      a.q = d_q->data();
      a.k = d_k->data();
      a.v = d_v->data();
      a.out = d_out->data();
      a.lse = d_lse->data();
      Status st = attention.Forward(a, *gs.gemm, gs.stream);
      ASSERT_TRUE(st.ok()) << st.message();
      st = attention.Backward(a, d_dout->data(), d_dq->data(), d_dk->data(), d_dv->data(), *gs.gemm, gs.stream);
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(cudaStreamSynchronize(gs.stream), cudaSuccess);
      const double tol = dt == DType::kF32 ? 1e-5 : 2e-2;
      const std::string what = StrCat(DTypeName(dt), " N=", s.N, " K=", s.K, " H=", s.H, " window=", s.window);
      EXPECT_LT(RelErr(*d_out->ToHost(), want.out), tol) << "out, " << what;
      EXPECT_LT(RelErr(*d_lse->ToHost(), want.lse), dt == DType::kF32 ? 1e-6 : 1e-2) << "lse, " << what;
      EXPECT_LT(RelErr(*d_dq->ToHost(), want.dq), tol) << "dq, " << what;
      EXPECT_LT(RelErr(*d_dk->ToHost(), want.dk), tol) << "dk, " << what;
      EXPECT_LT(RelErr(*d_dv->ToHost(), want.dv), tol) << "dv, " << what;
    }
  }
}

}  // namespace
}  // namespace gk::cuda
