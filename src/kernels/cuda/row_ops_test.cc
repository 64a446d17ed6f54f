// The GPU row operations against the CPU's (kernels/ops.h, checked against the PyTorch
// oracle): fresh random inputs, outputs poisoned with NaN first, so an unwritten element fails.
#include "kernels/cuda/row_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/decoder_ops.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

TEST(CudaRowOps, RmsNormMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  for (int64_t n : {64, 640, 5376, 7}) {
    const int64_t rows = 37;
    const auto x = Random(size_t(rows * n), rng, 3.f), w = Random(size_t(n), rng);
    for (bool weighted : {true, false}) {
      std::vector<float> want(x.size());
      gk::RmsNormRows(x.data(), weighted ? w.data() : nullptr, rows, n, 1e-6f, want.data());
      auto dx = DeviceBuffer<float>::From(x);
      auto dw = DeviceBuffer<float>::From(w);
      auto dy = DeviceBuffer<float>::From(Poison(x.size()));
      ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
      ASSERT_TRUE(cuda::RmsNormRows(dx->data(), weighted ? dw->data() : nullptr, rows, n, 1e-6f, dy->data(), 0).ok());
      auto got = dy->ToHost();
      ASSERT_TRUE(got.ok()) << got.message();
      EXPECT_LT(RelErr(*got, want), 1e-5) << n << (weighted ? " weighted" : "");
    }
  }
}

TEST(CudaRowOps, GeluSoftcapAndEmbeddingMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const size_t n = 100003;
  const auto gate = Random(n, rng, 2.f), up = Random(n, rng);
  std::vector<float> want(n);
  gk::GeluTanhMul(gate.data(), up.data(), int64_t(n), want.data());
  auto dg = DeviceBuffer<float>::From(gate);
  auto du = DeviceBuffer<float>::From(up);
  auto dout = DeviceBuffer<float>::From(Poison(n));
  ASSERT_TRUE(dg.ok() && du.ok() && dout.ok());
  ASSERT_TRUE(cuda::GeluTanhMul(dg->data(), du->data(), int64_t(n), dout->data(), 0).ok());
  EXPECT_LT(RelErr(*dout->ToHost(), want), 1e-5);

  auto logits = Random(n, rng, 40.f);
  auto dl = DeviceBuffer<float>::From(logits);
  ASSERT_TRUE(dl.ok());
  ASSERT_TRUE(cuda::Softcap(dl->data(), int64_t(n), 30.f, 0).ok());
  gk::Softcap(logits.data(), int64_t(n), 30.f);
  EXPECT_LT(RelErr(*dl->ToHost(), logits), 1e-5);

  const int64_t rows = 1000, D = 640;
  std::vector<uint16_t> table(size_t(rows * D));
  const auto values = Random(table.size(), rng);
  for (size_t i = 0; i < table.size(); ++i) table[i] = F32ToBf16(values[i]);
  const std::vector<int32_t> tokens = {5, 999, 0, 5, -1, 1000, 17};  // -1 and 1000: zero rows
  auto dt = DeviceBuffer<uint16_t>::From(table);
  auto dtok = DeviceBuffer<int32_t>::From(tokens);
  auto de = DeviceBuffer<float>::From(Poison(tokens.size() * size_t(D)));
  ASSERT_TRUE(dt.ok() && dtok.ok() && de.ok());
  ASSERT_TRUE(EmbedRows(dt->data(), DType::kBF16, rows, D, dtok->data(), int64_t(tokens.size()), 25.3f, -1, de->data(), 0).ok());
  auto got = de->ToHost();
  ASSERT_TRUE(got.ok());
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int64_t i = 0; i < D; ++i) {
      const bool valid = tokens[t] >= 0 && tokens[t] < rows;
      const float want_v = valid ? Bf16ToF32(table[size_t(tokens[t] * D + i)]) * 25.3f : 0.f;
      ASSERT_EQ((*got)[t * size_t(D) + size_t(i)], want_v) << t << " " << i;
    }
  }
}

}  // namespace
}  // namespace gk::cuda
