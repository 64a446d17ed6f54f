#include "kernels/matmul_q8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "tensor/q8_0.h"

namespace gk {
namespace {

struct Case {
  int64_t rows, cols, tokens;
};

// A Q8_0 matrix quantized from normal values, with its storage.
struct Q8Matrix {
  std::vector<float> f;              // the original values, row-major
  std::vector<uint8_t> bytes;       // holds the matrix at a 64-byte boundary
  MatrixView view;
};

Q8Matrix MakeQ8(int64_t rows, int64_t cols, uint32_t seed) {
  Q8Matrix m;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  m.f.resize(size_t(rows * cols));
  for (auto& v : m.f) v = nd(rng);
  if (rows > 2) std::fill(m.f.begin() + cols, m.f.begin() + 2 * cols, 0.f);  // an all-zero row
  MatrixView src{DType::kF32, rows, cols, m.f.data()};
  m.bytes.resize(size_t(Q8Bytes(rows, cols)) + 64);
  // The kernels use aligned loads: place the matrix on a 64-byte boundary.
  void* p = m.bytes.data() + (64 - reinterpret_cast<uintptr_t>(m.bytes.data()) % 64) % 64;
  QuantizePanelsQ8(src, 0, Q8Panels(rows), p);
  m.view = MatrixView{DType::kQ8_0, rows, cols, p};
  return m;
}

std::vector<float> RandomX(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  for (int64_t i = 0; i < n && i < 32; ++i) x[size_t(i)] = 0.f;  // an all-zero block
  return x;
}

TEST(Q8Layout, QuantizeRoundTripsWithinHalfAStep) {
  const int64_t R = 21, C = 96;
  Q8Matrix m = MakeQ8(R, C, 1);
  EXPECT_EQ(m.view.bytes(), 2 * (16 * C + 128));
  std::vector<float> row(static_cast<size_t>(C));
  for (int64_t r = 0; r < R; ++r) {
    m.view.RowToF32(r, row.data());
    for (int64_t b = 0; b < C / 32; ++b) {
      float amax = 0.f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(m.f[size_t(r * C + b * 32 + i)]));
      for (int i = 0; i < 32; ++i) {
        const size_t k = size_t(b * 32 + i);
        ASSERT_NEAR(row[k], m.f[size_t(r * C) + k], amax / 127.f * 0.502f) << "row " << r << " col " << k;
      }
    }
  }
}

TEST(Q8Layout, RowQuantizerMatchesScalarLoop) {
  std::vector<float> x = RandomX(32 * 40, 9);
  x[40] = 1e-30f;                 // a block whose scale is an f16 subnormal
  x[70] = 1e6f;                   // a block whose scale rounds down: clamped codes
  for (int i = 96; i < 128; ++i) x[size_t(i)] = 1e-9f;  // scale rounds to zero
  std::vector<int8_t> qa(x.size()), qb(x.size());
  std::vector<uint16_t> sa(x.size() / 32), sb(x.size() / 32);
  QuantizeRowQ8Scalar(x.data(), int64_t(x.size()), qa.data(), sa.data());
  QuantizeRowQ8(x.data(), int64_t(x.size()), qb.data(), sb.data());
  EXPECT_EQ(qa, qb);
  EXPECT_EQ(sa, sb);
  for (int8_t v : qa) ASSERT_GE(v, -127);
}

TEST(Q8Layout, CheckpointFormRoundTrips) {
  const int64_t R = 37, C = 64;
  Q8Matrix m = MakeQ8(R, C, 2);
  std::vector<int8_t> q(static_cast<size_t>(R * C));
  std::vector<uint16_t> s(static_cast<size_t>(R * C / 32));
  UnpackQ8(m.view, q.data(), s.data());
  for (int8_t v : q) ASSERT_GE(v, -127);
  std::vector<uint8_t> packed(size_t(Q8Bytes(R, C)), 0xee);
  PackPanelsQ8(q.data(), s.data(), R, C, 0, Q8Panels(R), packed.data());
  EXPECT_EQ(0, std::memcmp(packed.data(), m.view.data, packed.size()));
}

TEST(Q8Activations, EveryIsaGivesTheSameBytes) {
  if (BestSupportedIsa() != Isa::kAvx512) GTEST_SKIP() << "CPU lacks avx512";
  const int64_t T = 5, C = 160;
  std::vector<float> x = RandomX(T * C, 3);
  x[40] = 1e-30f;  // a tiny block
  x[100] = 40.f;   // a block with one outlier
  Q8Activations a, b;
  a.Resize(T, C);
  b.Resize(T, C);
  QuantizeActivationsQ8Scalar(x.data(), 0, T, &a);
  QuantizeActivationsQ8Avx512(x.data(), 0, T, &b);
  for (size_t i = 0; i < size_t(T * C / 4); ++i) ASSERT_EQ(a.q[i], b.q[i]) << "word " << i;
  for (size_t i = 0; i < size_t(T * C / 32); ++i) {
    ASSERT_EQ(a.d[i], b.d[i]) << "block " << i;
    ASSERT_EQ(a.corr[i], b.corr[i]) << "block " << i;
  }
}

// Every instruction-set path gives the scalar reference's result (the integer block sums are
// exact; only the f32 scaling order may differ), on shapes with partial panels, token tails,
// several token groups and an all-zero row and block.
class MatMulQ8Test : public ::testing::TestWithParam<std::tuple<Case, Isa>> {};

TEST_P(MatMulQ8Test, MatchesScalarReference) {
  const auto [shape, isa] = GetParam();
  if (int(isa) > int(BestSupportedIsa())) GTEST_SKIP() << "CPU lacks " << IsaName(isa);
  Q8Matrix m = MakeQ8(shape.rows, shape.cols, 4);
  std::vector<float> x = RandomX(shape.tokens * shape.cols, 5);
  Q8Activations a;
  a.Resize(shape.tokens, shape.cols);
  QuantizeActivationsQ8Scalar(x.data(), 0, shape.tokens, &a);
  std::vector<float> want(size_t(shape.tokens * shape.rows)), got(want.size(), NAN), rows(want.size(), NAN);
  MatMulQ8Scalar(m.view, a, want.data(), 0, shape.rows);
  ThreadPool pool(2);
  SetActiveIsa(isa);
  MatMul(m.view, x.data(), shape.tokens, got.data(), pool);
  // MatMulRows over an unaligned sub-range writes exactly that range.
  const int64_t r0 = std::min<int64_t>(5, shape.rows), r1 = std::max(r0, shape.rows - 3);
  MatMulRows(m.view, x.data(), shape.tokens, rows.data(), r0, r1);
  SetActiveIsa(BestSupportedIsa());
  const float tol = 1e-5f * std::sqrt(float(shape.cols));
  for (int64_t t = 0; t < shape.tokens; ++t) {
    for (int64_t r = 0; r < shape.rows; ++r) {
      const size_t i = size_t(t * shape.rows + r);
      ASSERT_NEAR(got[i], want[i], tol * (1.f + std::fabs(want[i]))) << "token " << t << " row " << r;
      if (r >= r0 && r < r1) {
        ASSERT_NEAR(rows[i], want[i], tol * (1.f + std::fabs(want[i]))) << "MatMulRows token " << t << " row " << r;
      } else {
        ASSERT_TRUE(std::isnan(rows[i])) << "MatMulRows wrote row " << r << " outside [" << r0 << ", " << r1 << ")";
      }
    }
  }
}

// Against f32 arithmetic: with the dequantized weights the only error is the activations'
// rounding, at most half a step d_x / 2 per element, so |Δy| ≤ Σ |w_c| · d_x(c) / 2.
TEST_P(MatMulQ8Test, WithinActivationRoundingOfF32Product) {
  const auto [shape, isa] = GetParam();
  if (int(isa) > int(BestSupportedIsa())) GTEST_SKIP() << "CPU lacks " << IsaName(isa);
  const int64_t R = shape.rows, C = shape.cols, T = shape.tokens;
  Q8Matrix m = MakeQ8(R, C, 6);
  std::vector<float> x = RandomX(T * C, 7);
  std::vector<float> got(static_cast<size_t>(T * R));
  ThreadPool pool(2);
  SetActiveIsa(isa);
  MatMul(m.view, x.data(), T, got.data(), pool);
  SetActiveIsa(BestSupportedIsa());
  std::vector<float> w(static_cast<size_t>(C));
  for (int64_t r = 0; r < R; ++r) {
    m.view.RowToF32(r, w.data());
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x.data() + t * C;
      double exact = 0, bound = 0;
      for (int64_t b = 0; b < C / 32; ++b) {
        float amax = 0.f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xt[b * 32 + i]));
        for (int i = 0; i < 32; ++i) {
          exact += double(w[size_t(b * 32 + i)]) * xt[b * 32 + i];
          bound += std::fabs(w[size_t(b * 32 + i)]) * amax / 127.0 / 2.0;
        }
      }
      ASSERT_LE(std::fabs(got[size_t(t * R + r)] - exact), bound * 1.001 + 1e-4) << "token " << t << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulQ8Test,
    ::testing::Combine(::testing::Values(Case{1, 32, 1}, Case{7, 64, 1}, Case{45, 160, 2}, Case{37, 96, 3},
                                         Case{64, 128, 5}, Case{19, 1120, 9}, Case{130, 2080, 70}, Case{33, 8192, 17}),
                       ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)));

}  // namespace
}  // namespace gk
