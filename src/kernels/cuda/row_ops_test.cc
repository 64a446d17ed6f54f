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

// Device bf16 buffers poisoned with 0xffff (a NaN) and the staging of `terms` of them.
struct StagingBuffers {
  DeviceBuffer<uint16_t> hi, lo, lo2;
  explicit StagingBuffers(size_t n) {
    for (DeviceBuffer<uint16_t>* b : {&hi, &lo, &lo2}) {
      auto made = DeviceBuffer<uint16_t>::From(std::vector<uint16_t>(n, 0xffff));
      EXPECT_TRUE(made.ok());
      if (made.ok()) *b = std::move(*made);
    }
  }
  Bf16Staging Terms(int terms) { return {hi.data(), terms > 1 ? lo.data() : nullptr, terms > 2 ? lo2.data() : nullptr}; }
  // Each value's terms, as SplitToBf16 makes them: hi rounded to nearest even, lo what hi leaves
  // (rounded), lo2 the rest; buffers past `terms` untouched.
  void ExpectTermsOf(const std::vector<float>& y, int terms, const char* what) {
    const auto h = *hi.ToHost(), l = *lo.ToHost(), l2 = *lo2.ToHost();
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(h[i], F32ToBf16(y[i])) << what << " " << i;
      const float r = y[i] - Bf16ToF32(h[i]);
      ASSERT_EQ(l[i], terms > 1 ? F32ToBf16(r) : 0xffff) << what << " " << i;
      if (terms > 2) ASSERT_EQ(double(Bf16ToF32(h[i])) + Bf16ToF32(l[i]) + Bf16ToF32(l2[i]), double(y[i])) << what << " " << i;
      else ASSERT_EQ(l2[i], 0xffff) << what << " " << i;
    }
  }
};

// The fused residual add: x = (x + RMSNorm(y)·w)·scale, then the next norm of the new row, as
// the CPU's two norms compute them; the norms and the gate (alone, and from a fused gate_up
// product's rows) write their bf16 terms beside their f32 outputs in every mode (1, 2 or 3 terms).
TEST(CudaRowOps, FusedResidualNormAndBf16CopiesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 5, n = 640;
  const auto y = Random(size_t(rows * n), rng, 5.f), w = Random(size_t(n), rng), w2 = Random(size_t(n), rng);
  const auto base = Random(size_t(rows * n), rng), up = Random(size_t(rows * n), rng);
  for (const float scale : {1.f, 0.375f}) {
    std::vector<float> normed(y.size()), want_x = base, want_out(y.size());
    gk::RmsNormRows(y.data(), w.data(), rows, n, 1e-6f, normed.data());
    for (size_t i = 0; i < want_x.size(); ++i) want_x[i] = (want_x[i] + normed[i]) * scale;
    gk::RmsNormRows(want_x.data(), w2.data(), rows, n, 1e-6f, want_out.data());
    for (int terms : {1, 2, 3}) {
      auto dy = DeviceBuffer<float>::From(y);
      auto dw = DeviceBuffer<float>::From(w);
      auto dw2 = DeviceBuffer<float>::From(w2);
      auto dx = DeviceBuffer<float>::From(base);
      auto dout = DeviceBuffer<float>::From(Poison(y.size()));
      ASSERT_TRUE(dy.ok() && dw.ok() && dw2.ok() && dx.ok() && dout.ok());
      StagingBuffers staged(y.size());
      ASSERT_TRUE(RmsNormAddRows(dy->data(), dw->data(), rows, n, 1e-6f, dx->data(), 0, scale,
                                 {dw2->data(), dout->data(), staged.Terms(terms)}).ok());
      EXPECT_LT(RelErr(*dx->ToHost(), want_x), 1e-5) << "scale " << scale;
      const auto out = *dout->ToHost();
      EXPECT_LT(RelErr(out, want_out), 1e-5) << "scale " << scale;
      staged.ExpectTermsOf(out, terms, "fused residual norm");
    }
  }
  // The plain norm and the gate with their bf16 terms.
  for (int terms : {1, 3}) {
    auto dy = DeviceBuffer<float>::From(y);
    auto dup = DeviceBuffer<float>::From(up);
    auto dout = DeviceBuffer<float>::From(Poison(y.size()));
    ASSERT_TRUE(dy.ok() && dup.ok() && dout.ok());
    StagingBuffers norm_terms(y.size()), gate_terms(y.size());
    ASSERT_TRUE(RmsNormRows(dy->data(), nullptr, rows, n, 1e-6f, dout->data(), 0, norm_terms.Terms(terms)).ok());
    std::vector<float> want(y.size());
    gk::RmsNormRows(y.data(), nullptr, rows, n, 1e-6f, want.data());
    auto out = *dout->ToHost();
    EXPECT_LT(RelErr(out, want), 1e-5);
    norm_terms.ExpectTermsOf(out, terms, "norm");
    ASSERT_TRUE(GeluTanhMul(dy->data(), dup->data(), rows * n, dout->data(), 0, gate_terms.Terms(terms)).ok());
    out = *dout->ToHost();
    for (size_t i = 0; i < y.size(); ++i) want[i] = gk::GeluTanh(y[i]) * up[i];
    EXPECT_LT(RelErr(out, want), 1e-5);
    gate_terms.ExpectTermsOf(out, terms, "gate");
    // The same from one product's rows, [gate | up] each (a decode step's fused gate_up).
    std::vector<float> gate_up(size_t(rows * 2 * n));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(y.begin() + r * n, n, gate_up.begin() + r * 2 * n);
      std::copy_n(up.begin() + r * n, n, gate_up.begin() + r * 2 * n + n);
    }
    auto dgu = DeviceBuffer<float>::From(gate_up);
    auto dh = DeviceBuffer<float>::From(Poison(y.size()));
    ASSERT_TRUE(dgu.ok() && dh.ok());
    StagingBuffers rows_terms(y.size());
    ASSERT_TRUE(GeluTanhMulRows(dgu->data(), 2 * n, dgu->data() + n, 2 * n, rows, n, dh->data(), n, 0,
                                rows_terms.Terms(terms)).ok());
    const auto h = *dh->ToHost();
    EXPECT_LT(RelErr(h, want), 1e-5);
    rows_terms.ExpectTermsOf(h, terms, "gate rows");
  }
}

}  // namespace
}  // namespace gk::cuda
