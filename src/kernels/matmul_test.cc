#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/isa.h"

namespace gk {
namespace {

struct Case {
  int64_t rows, cols, tokens;
};

// Every instruction-set path gives the scalar reference's result within rounding, over
// shapes that exercise the row/token edge blocks, column tails and the column-slice blocking.
class MatMulTest : public ::testing::TestWithParam<std::tuple<Case, DType, Isa>> {};

TEST_P(MatMulTest, MatchesScalarReference) {
  const auto [shape, dtype, isa] = GetParam();
  if (int(isa) > int(BestSupportedIsa())) GTEST_SKIP() << "CPU lacks " << IsaName(isa);
  std::mt19937 rng(42);
  std::normal_distribution<float> nd;
  std::vector<float> wf(size_t(shape.rows * shape.cols));
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wb[i] = F32ToBf16(nd(rng));
    wf[i] = Bf16ToF32(wb[i]);
  }
  // An odd offset into x checks that the kernels accept unaligned rows.
  std::vector<float> xbuf(size_t(shape.tokens * shape.cols) + 1);
  for (auto& v : xbuf) v = nd(rng);
  const float* x = xbuf.data() + 1;
  MatrixView w{dtype, shape.rows, shape.cols, dtype == DType::kF32 ? (const void*)wf.data() : (const void*)wb.data()};
  std::vector<float> want(size_t(shape.tokens * shape.rows)), got(want.size(), NAN);
  MatMulRowsScalar(w, x, shape.tokens, want.data(), 0, shape.rows);
  ThreadPool pool(2);
  // Our kernels (BLAS route off), then the sgemm route for every T (kernels/gemm.h).
  for (int64_t blas_min_tokens : {0, 1}) {
    SetBlasMinTokens(blas_min_tokens);
    SetActiveIsa(isa);
    std::fill(got.begin(), got.end(), NAN);
    MatMul(w, x, shape.tokens, got.data(), pool);
    SetActiveIsa(BestSupportedIsa());
    SetBlasMinTokens(BlasMinTokensDefault());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4f * std::sqrt(float(shape.cols)) * (1.f + std::fabs(want[i])))
          << "element " << i << " isa " << IsaName(isa) << " blas route " << blas_min_tokens;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulTest,
    ::testing::Combine(::testing::Values(Case{1, 16, 1}, Case{7, 33, 1}, Case{37, 100, 3}, Case{64, 64, 5},
                                         Case{19, 1100, 9}, Case{19, 1100, 1}, Case{130, 2050, 70}),
                       ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)));

}  // namespace
}  // namespace gk

#include "kernels/packed_bf16.h"

namespace gk {
namespace {

// Packed bf16 weights: the AVX-512 BF16 kernel equals the scalar packed reference (both round
// activations to bf16 and accumulate in f32), and both stay within bf16 activation rounding of
// the unpacked f32 product.
class PackedMatMulTest : public ::testing::TestWithParam<Case> {};

TEST_P(PackedMatMulTest, MatchesReferences) {
  const Case shape = GetParam();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<uint16_t> w(size_t(shape.rows * shape.cols)), packed;
  for (auto& v : w) v = F32ToBf16(nd(rng));
  packed = w;
  std::vector<float> x(size_t(shape.tokens * shape.cols));
  for (auto& v : x) v = nd(rng);
  MatrixView plain{DType::kBF16, shape.rows, shape.cols, w.data()};
  MatrixView pk{DType::kBF16, shape.rows, shape.cols, packed.data()};
  ASSERT_TRUE(CanPackBf16(pk));
  PackBf16InPlace(&pk);
  // Packing keeps every element addressable.
  std::vector<float> row_a(size_t(shape.cols)), row_b(size_t(shape.cols));
  for (int64_t r : {int64_t(0), shape.rows - 1, shape.rows / 2}) {
    plain.RowToF32(r, row_a.data());
    pk.RowToF32(r, row_b.data());
    ASSERT_EQ(row_a, row_b) << "row " << r;
  }
  ThreadPool pool(2);
  std::vector<float> want(size_t(shape.tokens * shape.rows));
  MatMulRowsScalar(plain, x.data(), shape.tokens, want.data(), 0, shape.rows);
  for (Bf16Activations mode : {Bf16Activations::kSplit, Bf16Activations::kRound}) {
    SetBf16Activations(mode);
    std::vector<float> ref(want.size()), got(want.size(), NAN);
    SetActiveIsa(Isa::kScalar);
    MatMul(pk, x.data(), shape.tokens, ref.data(), pool);
    SetActiveIsa(BestSupportedIsa());
    MatMul(pk, x.data(), shape.tokens, got.data(), pool);
    for (size_t i = 0; i < want.size(); ++i) {
      const float tol = 2e-5f * std::sqrt(float(shape.cols)) * (1.f + std::fabs(ref[i]));
      ASSERT_NEAR(got[i], ref[i], tol) << "element " << i;
      // Split: f32-accurate. Round: relative rounding 2^-9 per activation, random signs.
      const float vs_f32 = mode == Bf16Activations::kSplit ? 1e-5f : 8e-3f;
      ASSERT_NEAR(ref[i], want[i], vs_f32 * std::sqrt(float(shape.cols)) * (1.f + std::fabs(want[i])))
          << "element " << i;
    }
  }
  SetBf16Activations(Bf16Activations::kSplit);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PackedMatMulTest,
                         ::testing::Values(Case{16, 2, 1}, Case{32, 64, 1}, Case{80, 258, 7}, Case{64, 600, 13},
                                           Case{160, 1152, 70}, Case{48, 4096, 2}));

// MatMulShared gives each matrix exactly MatMul's result: for packed weights in one parallel
// loop over the panels of all of them (matrix sizes that end in partial 4-panel blocks and a
// one-panel matrix), for other layouts one MatMul each.
TEST(MatMulSharedTest, EqualsOneMatMulPerMatrix) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  constexpr int64_t kCols = 258;
  const int64_t rows[] = {48, 1040, 16};
  std::vector<std::vector<uint16_t>> store;
  for (int64_t r : rows) {
    store.emplace_back(size_t(r * kCols));
    for (auto& v : store.back()) v = F32ToBf16(nd(rng));
  }
  ThreadPool pool(2);
  for (bool packed : {true, false}) {
    std::vector<MatrixView> ws;
    std::vector<std::vector<uint16_t>> copies = store;
    for (size_t i = 0; i < copies.size(); ++i) {
      ws.push_back({DType::kBF16, rows[i], kCols, copies[i].data()});
      if (packed) PackBf16InPlace(&ws.back());
    }
    for (Bf16Activations mode : {Bf16Activations::kSplit, Bf16Activations::kRound}) {
      SetBf16Activations(mode);
      for (int64_t T : {1, 3, 70}) {
        std::vector<float> x(size_t(T * kCols));
        for (auto& v : x) v = nd(rng);
        std::vector<std::vector<float>> want, got;
        std::vector<WeightProduct> products;
        for (const MatrixView& w : ws) {
          want.emplace_back(size_t(T * w.rows));
          got.emplace_back(size_t(T * w.rows), NAN);
          MatMul(w, x.data(), T, want.back().data(), pool);
        }
        for (size_t i = 0; i < ws.size(); ++i) products.push_back({&ws[i], got[i].data()});
        MatMulShared(products, x.data(), T, pool);
        for (size_t i = 0; i < ws.size(); ++i) {
          ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
              << "matrix " << i << " T " << T << " packed " << packed;
        }
      }
    }
  }
  SetBf16Activations(Bf16Activations::kSplit);
}

}  // namespace
}  // namespace gk
