// The GPU loss head against the cross-entropy and its gradient computed here in double from the
// definitions: logits h·Eᵀ, the softcap c·tanh(l/c), log-sum-exp, the target's loss, the argmax,
// and dh = scale·Σ_v (softmax_v − [v = target])·(1 − (z_v/c)²)·E_v. Several chunks of the
// vocabulary, the last one short. Label cuda: skipped without a GPU.
#include "kernels/cuda/loss_head.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/matmul.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

TEST(CudaLossHead, LossArgmaxAndGradientMatchTheDefinitions) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  GemmOnStream gs;
  const Status made = gs.Create();
  ASSERT_TRUE(made.ok()) << made.message();
  const int64_t R = 37, D = 96, V = 3001;
  auto h = Random(size_t(R * D), rng), e = Random(size_t(V * D), rng, 0.3f);
  std::vector<uint16_t> e16(e.size());
  for (size_t i = 0; i < e.size(); ++i) {
    e16[i] = F32ToBf16(e[i]);
    e[i] = Bf16ToF32(e16[i]);
  }
  std::vector<int32_t> targets(static_cast<size_t>(R));
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  for (int32_t& t : targets) t = tok(rng);
  targets[3] = 0;
  targets[4] = int32_t(V - 1);
  auto d_h = DeviceBuffer<float>::From(h);
  auto d_e32 = DeviceBuffer<float>::From(e);
  auto d_e16 = DeviceBuffer<uint16_t>::From(e16);
  auto d_t = DeviceBuffer<int32_t>::From(targets);
  ASSERT_TRUE(d_h.ok() && d_e32.ok() && d_e16.ok() && d_t.ok());
  const float scale = 0.25f;
  for (float cap : {0.f, 3.f}) {
    // The reference.
    double want_loss = 0;
    int64_t want_correct = 0;
    std::vector<float> want_dh(size_t(R * D), 0.f);
    for (int64_t r = 0; r < R; ++r) {
      std::vector<double> z(static_cast<size_t>(V));
      double m = -1e300;
      int64_t best = 0;
      for (int64_t v = 0; v < V; ++v) {
        double l = 0;
        for (int64_t d = 0; d < D; ++d) l += double(h[size_t(r * D + d)]) * e[size_t(v * D + d)];
        z[size_t(v)] = cap > 0.f ? cap * std::tanh(l / cap) : l;
        if (z[size_t(v)] > z[size_t(best)]) best = v;
        m = std::max(m, z[size_t(v)]);
      }
      double s = 0;
      for (double x : z) s += std::exp(x - m);
      const double lse = m + std::log(s);
      want_loss += lse - z[size_t(targets[size_t(r)])];
      want_correct += best == targets[size_t(r)];
      std::vector<double> dh(static_cast<size_t>(D), 0.0);
      for (int64_t v = 0; v < V; ++v) {
        const double th = cap > 0.f ? z[size_t(v)] / cap : 0.0;
        const double g = (std::exp(z[size_t(v)] - lse) - (v == targets[size_t(r)] ? 1.0 : 0.0)) * (1 - th * th) * scale;
        for (int64_t d = 0; d < D; ++d) dh[size_t(d)] += g * e[size_t(v * D + d)];
      }
      for (int64_t d = 0; d < D; ++d) want_dh[size_t(r * D + d)] = float(dh[size_t(d)]);
    }
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SetBf16Activations(Bf16Activations::kSplit);
      LossHead head;
      auto d_dh = DeviceBuffer<float>::From(Poison(size_t(R * D)));
      ASSERT_TRUE(d_dh.ok());
      LossHeadArgs a;
      a.h = d_h->data();
      a.R = R;
      a.embed = DeviceMatrix{dt, V, D, dt == DType::kF32 ? static_cast<const void*>(d_e32->data()) : d_e16->data()};
      a.targets = d_t->data();
      a.cap = cap;
      a.scale = scale;
      a.dh = d_dh->data();
      a.chunk_rows = 700;  // five chunks, the last of 201 rows
      auto got = head.Run(a, *gs.gemm, gs.stream);
      ASSERT_TRUE(got.ok()) << got.message();
      EXPECT_NEAR(got->loss_sum, want_loss, 1e-5 * want_loss) << DTypeName(dt) << " cap " << cap;
      EXPECT_EQ(got->correct, want_correct);
      EXPECT_LT(RelErr(*d_dh->ToHost(), want_dh), 1e-5) << DTypeName(dt) << " cap " << cap;
    }
  }
}

}  // namespace
}  // namespace gk::cuda
