#include "kernels/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace gk {
namespace {

using MatMulFn = void (*)(const MatrixView&, const float*, int64_t, float*, bool, ThreadPool&);

// Against products of the same bf16 values computed in double: only the order of the f32
// accumulation differs. Both routes: oneDNN's bf16 matmul (where the CPU has AVX-512 BF16) and
// the emulated one every CPU runs.
void CheckAgainstExactProducts(MatMulFn mm, MatMulFn mm_t, bool native) {
  const int64_t T = 37, N = 96, K = 160;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> w(size_t(N * K));
  for (auto& v : w) v = F32ToBf16(nd(rng));
  const MatrixView mv{DType::kBF16, N, K, w.data()};
  if (native && !Bf16ProductsAvailable(mv)) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  std::vector<float> x(size_t(T * K)), dy(size_t(T * N));
  for (auto& v : x) v = nd(rng);
  for (auto& v : dy) v = nd(rng);
  ThreadPool pool(2);
  std::vector<float> y(size_t(T * N), 1.f), dx(size_t(T * K), 1.f);
  mm(mv, x.data(), T, y.data(), /*accumulate=*/true, pool);
  mm_t(mv, dy.data(), T, dx.data(), /*accumulate=*/false, pool);
  std::vector<float> dx2(size_t(T * K), 0.f);  // twice accumulated: 2·dx
  mm_t(mv, dy.data(), T, dx2.data(), /*accumulate=*/false, pool);
  mm_t(mv, dy.data(), T, dx2.data(), /*accumulate=*/true, pool);
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx2[i], 2 * dx[i], 1e-4 * (1 + std::fabs(dx[i]))) << i;
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double want = 1.0;  // accumulated onto the 1s
      for (int64_t k = 0; k < K; ++k) want += double(RoundToBf16(x[size_t(t * K + k)])) * Bf16ToF32(w[size_t(n * K + k)]);
      worst = std::max(worst, std::fabs(want - y[size_t(t * N + n)]) / (1.0 + std::fabs(want)));
    }
    for (int64_t k = 0; k < K; ++k) {
      double want = 0;
      for (int64_t n = 0; n < N; ++n) want += double(RoundToBf16(dy[size_t(t * N + n)])) * Bf16ToF32(w[size_t(n * K + k)]);
      worst = std::max(worst, std::fabs(want - dx[size_t(t * K + k)]) / (1.0 + std::fabs(want)));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(Bf16Products, NativeRouteEqualsExactProductsOfRoundedActivations) {
  CheckAgainstExactProducts(Bf16WeightMatMul, Bf16WeightMatMulT, true);
}

TEST(Bf16Products, EmulatedRouteEqualsExactProductsOfRoundedActivations) {
  CheckAgainstExactProducts(Bf16WeightMatMulEmulated, Bf16WeightMatMulTEmulated, false);
}

}  // namespace
}  // namespace gk
