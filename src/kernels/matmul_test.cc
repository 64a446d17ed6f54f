#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
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
  SetActiveIsa(isa);
  MatMul(w, x, shape.tokens, got.data(), pool);
  SetActiveIsa(BestSupportedIsa());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * std::sqrt(float(shape.cols)) * (1.f + std::fabs(want[i])))
        << "element " << i << " isa " << IsaName(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulTest,
    ::testing::Combine(::testing::Values(Case{1, 16, 1}, Case{7, 33, 1}, Case{37, 100, 3}, Case{64, 64, 5},
                                         Case{19, 1100, 9}, Case{130, 2050, 70}),
                       ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)));

}  // namespace
}  // namespace gk
