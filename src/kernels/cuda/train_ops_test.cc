// The GPU's training row operations against the CPU trainer's (kernels/train_ops.h, kernels/ops.h,
// engines/train/adamw.h), on fresh random data with poisoned outputs. Label cuda: skipped
// without a GPU.
#include "kernels/cuda/train_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engines/train/adamw.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/decoder_ops.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"

namespace gk::cuda {
namespace {

template <class T>
DeviceBuffer<T> Up(const std::vector<T>& host) {
  auto b = DeviceBuffer<T>::From(host);
  EXPECT_TRUE(b.ok()) << b.message();
  return b.ok() ? std::move(*b) : DeviceBuffer<T>();
}

template <class T>
std::vector<T> Down(const DeviceBuffer<T>& b) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto h = b.ToHost();
  EXPECT_TRUE(h.ok()) << h.message();
  return h.ok() ? *h : std::vector<T>();
}

TEST(CudaTrainOps, RmsNormAndGeluBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 7, n = 1536;
  const auto x = Random(size_t(rows * n), rng, 2.f), dy = Random(x.size(), rng), w = Random(size_t(n), rng);
  auto dx_prior = Random(x.size(), rng);
  auto d_x = Up(x), d_dy = Up(dy), d_w = Up(w);
  for (bool weighted : {true, false}) {
    for (bool accumulate : {false, true}) {
      std::vector<float> want = accumulate ? dx_prior : std::vector<float>(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        RmsNormBackward(x.data() + r * n, weighted ? w.data() : nullptr, n, 1e-6f, dy.data() + r * n, want.data() + r * n,
                        accumulate);
      }
      auto d_dx = Up(accumulate ? dx_prior : Poison(x.size()));
      const Status st = RmsNormBackwardRows(d_x.data(), weighted ? d_w.data() : nullptr, rows, n, 1e-6f, d_dy.data(),
                                            d_dx.data(), accumulate, nullptr);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_LT(RelErr(Down(d_dx), want), 1e-6) << "weighted " << weighted << ", accumulate " << accumulate;
    }
  }
  const int64_t m = 100003;  // past one block's grid-stride step, not a multiple of anything
  const auto gate = Random(size_t(m), rng, 3.f), up = Random(size_t(m), rng), dout = Random(size_t(m), rng);
  std::vector<float> dgate(static_cast<size_t>(m)), dup(static_cast<size_t>(m));
  gk::GeluTanhMulBackward(gate.data(), up.data(), dout.data(), m, dgate.data(), dup.data());
  auto d_gate = Up(gate), d_up = Up(up), d_dout = Up(dout), d_dgate = Up(Poison(size_t(m))), d_dup = Up(Poison(size_t(m)));
  const Status st = GeluTanhMulBackward(d_gate.data(), d_up.data(), d_dout.data(), m, d_dgate.data(), d_dup.data(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LT(RelErr(Down(d_dgate), dgate), 1e-5);
  EXPECT_LT(RelErr(Down(d_dup), dup), 1e-5);
}

// The MoE experts' fused gate|up rows (row stride 2·Fe) against the CPU's per-row backward, as
// TrainingModel::MoeBackward runs it; and the weighted sum's backward per slot.
TEST(CudaTrainOps, MoeBackwardPiecesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 37, Fe = 300, D = 520, T = 11;
  const auto eg = Random(size_t(rows * 2 * Fe), rng, 3.f), dact = Random(size_t(rows * Fe), rng);
  std::vector<float> dgu(static_cast<size_t>(rows * 2 * Fe));
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = eg.data() + r * 2 * Fe;
    gk::GeluTanhMulBackward(g, g + Fe, dact.data() + r * Fe, Fe, dgu.data() + r * 2 * Fe, dgu.data() + r * 2 * Fe + Fe);
  }
  auto d_eg = Up(eg), d_dact = Up(dact), d_dgu = Up(Poison(dgu.size()));
  Status st = GeluTanhMulBackwardRows(d_eg.data(), d_eg.data() + Fe, 2 * Fe, d_dact.data(), Fe, rows, Fe, d_dgu.data(),
                                     d_dgu.data() + Fe, 2 * Fe, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LT(RelErr(Down(d_dgu), dgu), 1e-5);

  const auto dy = Random(size_t(T * D), rng), eo = Random(size_t(rows * D), rng), weight = Random(size_t(rows), rng);
  std::vector<int32_t> token(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) token[size_t(i)] = int32_t((i * 7) % T);
  std::vector<float> deo(static_cast<size_t>(rows * D)), dw(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    double dot = 0;
    for (int64_t j = 0; j < D; ++j) {
      const float g = dy[size_t(token[size_t(i)] * D + j)];
      dot += double(g) * eo[size_t(i * D + j)];
      deo[size_t(i * D + j)] = weight[size_t(i)] * g;
    }
    dw[size_t(i)] = float(dot);
  }
  auto d_dy = Up(dy), d_eo = Up(eo), d_w = Up(weight), d_deo = Up(Poison(deo.size())), d_dw = Up(Poison(dw.size()));
  auto d_tok = Up(token);
  st = MoeSlotBackward(d_dy.data(), D, d_tok.data(), d_w.data(), d_eo.data(), rows, d_deo.data(), d_dw.data(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(Down(d_deo), deo);  // one product per element: exact
  EXPECT_LT(RelErr(Down(d_dw), dw), 1e-6);
}

// The inverse rotation, as the CPU trainer computes it (ApplyRopeCosSin with the sines negated),
// on a table with a partial-RoPE tail (cos 1, sin 0).
TEST(CudaTrainOps, RopeBackwardIsTheCpusInverseRotation) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t T = 9, heads = 4, H = 256;
  std::vector<float> inv_freq(size_t(H / 2));
  for (int64_t i = 0; i < H / 2; ++i) inv_freq[size_t(i)] = i < H / 4 ? std::pow(10000.f, -2.f * float(i) / float(H)) : 0.f;
  std::vector<float> table(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) RopeCosSin(inv_freq.data(), H / 2, 1000 * t + 3, table.data() + t * H);
  const auto dy = Random(size_t(T * heads * H), rng);
  std::vector<float> want = dy;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> inv(table.begin() + t * H, table.begin() + (t + 1) * H);
    for (int64_t i = H / 2; i < H; ++i) inv[size_t(i)] = -inv[size_t(i)];
    ApplyRopeCosSin(want.data() + t * heads * H, heads, H, inv.data());
  }
  auto d = Up(dy), d_table = Up(table);
  const Status st = RopeRows(d.data(), T, heads, H, d_table.data(), nullptr, /*inverse=*/true);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LT(RelErr(Down(d), want), 1e-6);
}

// A chunk of logits (vocabulary ids v0 .. v0 + n) whose rows' targets fall inside, before and
// after it; with and without a soft cap.
TEST(CudaTrainOps, CrossEntropyGradMatchesTheCpuRow) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 5, n = 4099, v0 = 8192;
  const auto z = Random(size_t(rows * n), rng, 4.f);
  const std::vector<float> lse = {9.f, 10.5f, 8.25f, 11.f, 9.75f};
  const std::vector<int32_t> target = {int32_t(v0 + 17), int32_t(v0 - 3), int32_t(v0 + n - 1), int32_t(v0 + n), int32_t(v0)};
  for (float cap : {0.f, 30.f}) {
    std::vector<float> want = z;
    for (int64_t r = 0; r < rows; ++r) {
      CrossEntropyGradRow(want.data() + r * n, n, lse[size_t(r)], int64_t(target[size_t(r)]) - v0, cap, 0.125f);
    }
    auto d_z = Up(z), d_lse = Up(lse);
    auto d_target = Up(target);
    const Status st = CrossEntropyGradRows(d_z.data(), rows, n, d_lse.data(), d_target.data(), v0, cap, 0.125f, nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_LT(RelErr(Down(d_z), want), 1e-5) << "cap " << cap;
  }
}

// AdamW on the GPU gives AdamW::Step's bits, step after step, with weight decay; the gradient
// norm's sum of squares and the clipping scale agree with GlobalGradNorm's.
TEST(CudaTrainOps, AdamWGivesTheCpuStepsBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 70001;
  std::vector<float> p = Random(size_t(n), rng, 0.1f), gpu_p = p;
  train::AdamWOptions o;
  o.weight_decay = 0.01;
  train::AdamW cpu(o, {n});
  auto d_p = Up(p), d_m = Up(std::vector<float>(size_t(n), 0.f)), d_v = Up(std::vector<float>(size_t(n), 0.f));
  for (int step = 1; step <= 3; ++step) {
    const auto g = Random(size_t(n), rng, 0.01f);
    const double lr = 2e-4 * step;
    const train::ParamRef ref{p.data(), g.data(), n};
    cpu.Step({&ref, 1}, lr);
    AdamWUpdate u;
    u.beta1 = o.beta1, u.beta2 = o.beta2, u.eps = o.eps;
    u.step_size = lr / (1.0 - std::pow(o.beta1, double(step)));
    u.inv_bc2_sqrt = 1.0 / std::sqrt(1.0 - std::pow(o.beta2, double(step)));
    u.decay = lr * o.weight_decay;
    auto d_g = Up(g);
    const Status st = AdamWStep(d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, u, nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    const auto got = Down(d_p);
    ASSERT_EQ(got.size(), p.size());
    EXPECT_EQ(std::memcmp(got.data(), p.data(), p.size() * sizeof(float)), 0) << "step " << step;
    EXPECT_EQ(std::memcmp(Down(d_m).data(), cpu.m()[0].data(), p.size() * sizeof(float)), 0) << "step " << step;
    EXPECT_EQ(std::memcmp(Down(d_v).data(), cpu.v()[0].data(), p.size() * sizeof(float)), 0) << "step " << step;
    auto d_sum = Up(std::vector<double>{0.0});
    ASSERT_TRUE(AddSumOfSquares(d_g.data(), n, d_sum.data(), nullptr).ok());
    const std::span<const float> gs(g);
    const double norm = train::GlobalGradNorm({&gs, 1});
    EXPECT_NEAR(std::sqrt(Down(d_sum)[0]), norm, 1e-12 * norm);
    ASSERT_TRUE(ScaleInPlace(d_g.data(), n, 0.5f, nullptr).ok());
    EXPECT_EQ(Down(d_g)[7], g[7] * 0.5f);
  }
}

}  // namespace
}  // namespace gk::cuda
