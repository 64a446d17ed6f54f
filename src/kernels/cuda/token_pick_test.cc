// The GPU's token picks against the CPU reference (kernels/token_pick.h) on the same logits and
// keys. Label cuda: skipped without a GPU.
#include "kernels/cuda/token_pick.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"

namespace gk::cuda {
namespace {

Result<std::vector<int32_t>> PickOnGpu(const std::vector<float>& logits, int64_t n, const std::vector<TokenPick>& picks) {
  const int64_t rows = int64_t(picks.size());
  GK_ASSIGN_OR_RETURN(auto d_logits, DeviceBuffer<float>::From(logits));
  GK_ASSIGN_OR_RETURN(auto d_picks, DeviceBuffer<TokenPick>::From(picks));
  GK_ASSIGN_OR_RETURN(auto d_tokens, DeviceBuffer<int32_t>::From(std::vector<int32_t>(size_t(rows), -1)));
  GK_RETURN_IF_ERROR(PickTokens(d_logits.data(), rows, n, d_picks.data(), d_tokens.data(), nullptr));
  GK_RETURN_IF_ERROR(Check(cudaDeviceSynchronize(), "PickTokens"));
  return d_tokens.ToHost();
}

// Rows of random logits (some equal: rounded to 1/16) under every kind of pick. Each token must
// be the reference's, but for rare near-ties of the f32 scores or sums (logf and the order of
// additions differ by an ulp between the devices): at most 1 row in 100, and even then a
// survivor of the reference or the one just past its cut.
TEST(CudaTokenPick, PicksWhatTheCpuReferencePicks) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  for (int64_t n : {int64_t(1000), int64_t(262144)}) {
    const std::vector<TokenPick> shapes = {
        {0.f, 0, 1.f, 0},    {1.f, 0, 1.f, 0},     {0.7f, 40, 1.f, 0},   {1.f, 1, 1.f, 0},  {1.3f, 0, 0.9f, 0},
        {0.6f, 0, 0.5f, 0},  {1.f, 64, 0.95f, 0},  {2.f, int32_t(n - 1), 1.f, 0},          {1.f, 0, 1e-6f, 0},
        {0.2f, 7, 0.3f, 0},
    };
    const int64_t rows = n > 1000 ? 40 : 400;
    std::vector<float> logits = Random(size_t(rows * n), rng, 3.f);
    for (float& x : logits) x = std::round(x * 16.f) / 16.f;
    std::vector<TokenPick> picks(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      picks[size_t(r)] = shapes[size_t(r) % shapes.size()];
      picks[size_t(r)].key = rng() * 0x100000001ull + uint64_t(r);
    }
    auto got = PickOnGpu(logits, n, picks);
    ASSERT_TRUE(got.ok()) << got.message();
    int mismatches = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * n;
      const TokenPick& p = picks[size_t(r)];
      const int32_t want = PickTokenReference(row, n, p), tok = (*got)[size_t(r)];
      if (tok == want) continue;
      ++mismatches;
      ASSERT_GT(p.temperature, 0.f) << "greedy row " << r << ": " << tok << " instead of " << want;
      std::vector<int32_t> near = TokenPickSurvivors(row, n, TokenPick{p.temperature, p.top_k, 1.f, 0});
      const size_t cut = TokenPickSurvivors(row, n, p).size();
      near.resize(std::min(near.size(), cut + 1));
      EXPECT_NE(std::find(near.begin(), near.end(), tok), near.end()) << "row " << r << " of " << n << ": token " << tok;
    }
    EXPECT_LE(mismatches, rows / 100) << "rows of " << n;
  }
}

// Equal logits: the cuts keep the lowest indices, exactly (weights of 1 sum without rounding).
TEST(CudaTokenPick, TiesAreCutByIndex) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 5000, rows = 300;
  std::vector<float> logits(static_cast<size_t>(rows * n), 0.25f);
  std::vector<TokenPick> picks(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    picks[size_t(r)] = r % 3 == 0 ? TokenPick{1.f, 10, 1.f, 0} : r % 3 == 1 ? TokenPick{1.f, 0, 0.25f, 0} : TokenPick{1.f, 100, 0.5f, 0};
    picks[size_t(r)].key = uint64_t(r) * 7919;
  }
  auto got = PickOnGpu(logits, n, picks);
  ASSERT_TRUE(got.ok()) << got.message();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t limit = r % 3 == 0 ? 10 : r % 3 == 1 ? 1250 : 50;
    EXPECT_LT((*got)[size_t(r)], limit) << "row " << r;
    EXPECT_EQ((*got)[size_t(r)], PickTokenReference(logits.data() + r * n, n, picks[size_t(r)])) << "row " << r;
  }
}

}  // namespace
}  // namespace gk::cuda
