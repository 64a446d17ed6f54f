// The GEMV kernel against double-precision products on fresh random data, and GemmRunner's
// route through it. Label cuda: skipped without a GPU.
#include "kernels/cuda/gemv.h"

#include <gtest/gtest.h>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/matmul.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

// Every token count 1..8 on rows that leave the last block part-filled, x rounded and not, then
// accumulated into: f32 sums of exact products are within ~1e-6 of the double sums.
TEST(CudaGemv, MatchesDoubleProducts) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{37, 512}, {300, 1288}}) {
    const SameWeights sw(rows, cols, rng);
    for (int64_t T = 1; T <= kGemvMaxTokens; ++T) {
      const auto x = Random(size_t(T * cols), rng, 2.f);
      auto dx = DeviceBuffer<float>::From(x);
      ASSERT_TRUE(dx.ok());
      for (bool round : {true, false}) {
        const auto want = DoubleProduct(sw.w, x, rows, cols, T, round);
        auto dy = DeviceBuffer<float>::From(Poison(size_t(T * rows)));
        ASSERT_TRUE(dy.ok());
        Status st = GemvBf16(sw.bf16.data(), rows, cols, dx->data(), T, dy->data(), round, false, 0);
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_LT(RelErr(*dy->ToHost(), want), 2e-6) << rows << "x" << cols << " T=" << T << " round=" << round;
        st = GemvBf16(sw.bf16.data(), rows, cols, dx->data(), T, dy->data(), round, true, 0);
        ASSERT_TRUE(st.ok()) << st.message();
        std::vector<float> twice = want;
        for (float& v : twice) v *= 2.f;
        EXPECT_LT(RelErr(*dy->ToHost(), twice), 2e-6) << rows << "x" << cols << " T=" << T << " accumulated";
      }
    }
  }
}

// What the kernel does not take: GemmRunner keeps cuBLASLt for it; GemvBf16 refuses it.
TEST(CudaGemv, RefusesWhatItDoesNotTake) {
  alignas(16) static float x[16];
  alignas(16) static uint16_t w[16];
  EXPECT_TRUE(GemvSupports(w, x, 8, 1));
  EXPECT_FALSE(GemvSupports(w, x, 8, 0));
  EXPECT_FALSE(GemvSupports(w, x, 8, kGemvMaxTokens + 1));
  EXPECT_FALSE(GemvSupports(w, x, 12, 1));  // rows not 16-byte multiples
  EXPECT_FALSE(GemvSupports(w + 1, x, 8, 1));
  EXPECT_FALSE(GemvSupports(w, x + 1, 8, 1));
  const Status st = GemvBf16(w, 1, 12, x, 1, x, true, false, 0);
  EXPECT_FALSE(st.ok());
}

// GemmRunner with the route on: few rows take the kernel (the same numbers as calling it), more
// rows take cuBLASLt, in the round and the split modes.
TEST(CudaGemv, GemmRunnerTakesItForFewRows) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  GemmOnStream g;
  const Status made = g.Create();
  ASSERT_TRUE(made.ok()) << made.message();
  const int64_t rows = 96, cols = 256;
  const SameWeights sw(rows, cols, rng);
  const DeviceMatrix m = sw.As(DType::kBF16);
  for (const Bf16Activations mode : {Bf16Activations::kRound, Bf16Activations::kSplit}) {
    ScopedBf16Activations scoped(mode);
    for (int64_t T : {1, 8, 9}) {
      auto dx = DeviceBuffer<float>::From(Random(size_t(T * cols), rng));
      auto via_runner = DeviceBuffer<float>::From(Poison(size_t(T * rows)));
      auto direct = DeviceBuffer<float>::From(Poison(size_t(T * rows)));
      auto cublas = DeviceBuffer<float>::From(Poison(size_t(T * rows)));
      ASSERT_TRUE(dx.ok() && via_runner.ok() && direct.ok() && cublas.ok());
      g.gemm->set_small_batch_gemv(0);
      ASSERT_TRUE(g.gemm->Run(m, dx->data(), T, cublas->data()).ok());
      g.gemm->set_small_batch_gemv(kGemvMaxTokens);
      ASSERT_TRUE(g.gemm->Run(m, dx->data(), T, via_runner->data()).ok());
      ASSERT_TRUE(GemvBf16(sw.bf16.data(), rows, cols, dx->data(), std::min<int64_t>(T, kGemvMaxTokens), direct->data(),
                           mode == Bf16Activations::kRound, false, g.stream).ok());
      ASSERT_EQ(cudaStreamSynchronize(g.stream), cudaSuccess);
      const auto got = *via_runner->ToHost(), kernel = *direct->ToHost(), lt = *cublas->ToHost();
      if (T <= kGemvMaxTokens) {
        EXPECT_EQ(got, kernel) << "T=" << T;
      } else {
        EXPECT_EQ(got, lt) << "T=" << T << ": past the kernel's rows, cuBLASLt";
      }
      EXPECT_LT(RelErr(got, lt), mode == Bf16Activations::kRound ? 1e-5 : 2e-5) << "T=" << T;
    }
  }
}

}  // namespace
}  // namespace gk::cuda
