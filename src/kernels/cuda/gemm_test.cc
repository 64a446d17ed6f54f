// cuBLASLt weight products against double-precision references on fresh random data: f32 weights
// stay f32 (TF32 off), bf16 weights with split activations are f32-accurate, rounded activations
// land at bf16 rounding. Label cuda: skipped without a GPU.
#include "kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/matmul.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

// y = x · Wᵀ in double, W given as floats (the bf16 values widened).
std::vector<float> Reference(const std::vector<float>& w, const std::vector<float>& x, int64_t rows, int64_t cols, int64_t T) {
  std::vector<float> y(size_t(T * rows));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += double(w[size_t(r * cols + c)]) * double(x[size_t(t * cols + c)]);
      y[size_t(t * rows + r)] = float(s);
    }
  }
  return y;
}

TEST(CudaGemm, MatchesDoubleProductsInEveryMode) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  GemmOnStream g;
  const Status made = g.Create();
  ASSERT_TRUE(made.ok()) << made.message();
  cudaStream_t stream = g.stream;
  GemmRunner* gemm = g.gemm.get();
  for (const auto& [rows, cols, T] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{320, 640, 1}, {96, 512, 37}, {1000, 256, 130}}) {
    auto w = Random(size_t(rows * cols), rng), x = Random(size_t(T * cols), rng);
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w16[i] = F32ToBf16(w[i]);
      w[i] = Bf16ToF32(w16[i]);  // the same values in both dtypes
    }
    const auto want = Reference(w, x, rows, cols, T);
    auto dw32 = DeviceBuffer<float>::From(w);
    auto dw16 = DeviceBuffer<uint16_t>::From(w16);
    auto dx = DeviceBuffer<float>::From(x);
    ASSERT_TRUE(dw32.ok() && dw16.ok() && dx.ok());
    struct Mode {
      DType dtype;
      Bf16Activations act;
      double tolerance;
    };
    for (const Mode& m : {Mode{DType::kF32, Bf16Activations::kSplit, 1e-5}, Mode{DType::kBF16, Bf16Activations::kSplit, 1e-5},
                          Mode{DType::kBF16, Bf16Activations::kRound, 2e-2}}) {
      SetBf16Activations(m.act);
      const DeviceMatrix dm{m.dtype, rows, cols, m.dtype == DType::kF32 ? static_cast<const void*>(dw32->data()) : dw16->data()};
      auto dy = DeviceBuffer<float>::From(Poison(size_t(T * rows)));
      ASSERT_TRUE(dy.ok());
      Status st = gemm->Run(dm, dx->data(), T, dy->data());
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      auto got = dy->ToHost();
      ASSERT_TRUE(got.ok());
      EXPECT_LT(RelErr(*got, want), m.tolerance) << DTypeName(m.dtype) << " " << rows << "x" << cols << " T=" << T;
      // Accumulating adds the same product again.
      st = gemm->Run(dm, dx->data(), T, dy->data(), /*accumulate=*/true);
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<float> twice = want;
      for (float& v : twice) v *= 2.f;
      EXPECT_LT(RelErr(*dy->ToHost(), twice), m.tolerance);
    }
  }
  SetBf16Activations(Bf16Activations::kSplit);
}

}  // namespace
}  // namespace gk::cuda
