#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace gk {
namespace {

// Sgemm through both libraries (OpenBLAS; oneDNN, which multi-threaded calls use on AVX-512
// CPUs) against a double-precision loop: every transpose combination, alpha and beta, leading
// dimensions wider than the matrices, sizes past the libraries' blocking.
TEST(SgemmTest, BothLibrariesMatchADoubleLoop) {
  struct Case {
    int64_t M, N, K;
    bool ta, tb;
    float alpha, beta;
  };
  const Case cases[] = {{1, 1, 1, false, false, 1.f, 0.f},   {37, 65, 129, false, true, 0.5f, 1.f},
                        {130, 17, 300, true, false, 2.f, -1.f}, {64, 200, 33, true, true, 1.f, 0.5f},
                        {513, 96, 640, false, false, 1.f, 0.f}};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  SetGemmThreads(2);
  for (const Case& c : cases) {
    const int64_t lda = (c.ta ? c.M : c.K) + 3, ldb = (c.tb ? c.K : c.N) + 5, ldc = c.N + 7;
    std::vector<float> A(size_t((c.ta ? c.K : c.M) * lda)), B(size_t((c.tb ? c.N : c.K) * ldb)),
        C0(size_t(c.M * ldc));
    for (auto& v : A) v = nd(rng);
    for (auto& v : B) v = nd(rng);
    for (auto& v : C0) v = nd(rng);
    std::vector<double> want(C0.size());
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          acc += double(c.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
                 double(c.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
        }
        want[size_t(i * ldc + j)] = c.alpha * acc + c.beta * double(C0[size_t(i * ldc + j)]);
      }
    }
    for (int library : {0, 1}) {
      ForceSgemmLibrary(library);
      EXPECT_EQ(std::string(SgemmLibrary(2)), library ? "oneDNN" : "OpenBLAS");
      std::vector<float> C = C0;
      Sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
      for (int64_t i = 0; i < c.M; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
          const size_t e = size_t(i * ldc + j);
          if (j >= c.N) {  // padding between rows is not touched
            ASSERT_EQ(C[e], C0[e]) << "library " << library;
            continue;
          }
          ASSERT_NEAR(C[e], want[e], 1e-5 * std::sqrt(double(c.K)) * (4.0 + std::fabs(want[e])))
              << "library " << library << " M " << c.M << " N " << c.N << " K " << c.K << " at " << i << "," << j;
        }
      }
    }
  }
  ForceSgemmLibrary(-1);
  EXPECT_EQ(std::string(SgemmLibrary(1)), "OpenBLAS");  // one thread always stays with OpenBLAS
}

}  // namespace
}  // namespace gk
