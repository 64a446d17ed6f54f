#include "kernels/lora_segments.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/packed_bf16.h"
#include "tensor/dtype.h"

namespace gk {
namespace {

struct Factor {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  MatrixView view;
};

// rows × cols of N(0, 1), as f32 or (rounded) bf16, packed when asked and possible.
Factor Random(int64_t rows, int64_t cols, DType dtype, bool pack, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Factor f;
  f.f32.resize(size_t(rows * cols));
  for (float& v : f.f32) v = dtype == DType::kBF16 ? RoundToBf16(nd(rng)) : nd(rng);
  if (dtype == DType::kF32) {
    f.view = {DType::kF32, rows, cols, f.f32.data()};
  } else {
    for (float v : f.f32) f.bf16.push_back(F32ToBf16(v));
    f.view = {DType::kBF16, rows, cols, f.bf16.data()};
    if (pack && CanPackBf16(f.view)) PackBf16InPlace(&f.view);
  }
  return f;
}

// Three projections of one input over segments of two adapters (one of them twice), against
// the products in double: f32 factors, bf16 row-major, bf16 packed.
TEST(LoraSegments, MatchesTheProductsPerSegment) {
  const bool can_pack = ActiveIsa() == Isa::kAvx512 && CpuHasAvx512Bf16();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool pack : {false, true}) {
      if (dtype == DType::kF32 && pack) continue;
      std::mt19937 rng(5);
      const int64_t T = 11, in = 96, r = 16;
      const int64_t outs[] = {48, 320, 32};
      std::vector<float> x(size_t(T * in));
      std::normal_distribution<float> nd;
      for (float& v : x) v = nd(rng);
      struct Adapter {
        Factor a[3], b[3];
      } ad[2];
      for (Adapter& A : ad) {
        for (int p = 0; p < 3; ++p) {
          A.a[p] = Random(r, in, dtype, pack, rng);
          A.b[p] = Random(outs[p], r, dtype, pack, rng);
        }
      }
      std::vector<std::vector<float>> y(3), want(3);
      for (int p = 0; p < 3; ++p) {
        y[p].assign(size_t(T * outs[p]), 0.5f);
        want[p] = y[p];
      }
      // Rows 0-3 adapter 0, 4-5 base, 6 adapter 1, 7-10 adapter 0 again.
      const struct {
        int64_t row, rows;
        int adapter;
      } runs[] = {{0, 4, 0}, {6, 1, 1}, {7, 4, 0}};
      std::vector<LoraSegment> segs;
      for (int p = 0; p < 3; ++p) {
        for (const auto& run : runs) {
          const Adapter& A = ad[run.adapter];
          segs.push_back({run.row, run.rows, &A.a[p].view, &A.b[p].view, y[p].data()});
          for (int64_t t = run.row; t < run.row + run.rows; ++t) {
            std::vector<double> s(static_cast<size_t>(r), 0.0);
            for (int64_t k = 0; k < r; ++k) {
              for (int64_t i = 0; i < in; ++i) {
                s[size_t(k)] += double(A.a[p].f32[size_t(k * in + i)]) * x[size_t(t * in + i)];
              }
            }
            for (int64_t o = 0; o < outs[p]; ++o) {
              double d = 0;
              for (int64_t k = 0; k < r; ++k) d += double(A.b[p].f32[size_t(o * r + k)]) * s[size_t(k)];
              want[p][size_t(t * outs[p] + o)] += float(d);
            }
          }
        }
      }
      ThreadPool pool(2);
      LoraScratch scratch;
      ApplyLoraSegments(segs, x.data(), scratch, pool);
      for (int p = 0; p < 3; ++p) {
        double err = 0, scale = 0;
        for (size_t i = 0; i < y[p].size(); ++i) {
          err = std::max(err, double(std::fabs(y[p][i] - want[p][i])));
          scale = std::max(scale, double(std::fabs(want[p][i])));
        }
        // bf16 kernels round x (and the shrunk values) to bf16 in round mode; f32 sums differ in order.
        const double tol = dtype == DType::kF32 ? 1e-5 : 2e-2;
        EXPECT_LT(err / scale, tol) << DTypeName(dtype) << (pack ? " packed" : "") << " projection " << p;
        for (int64_t t = 4; t < 6; ++t) {  // base rows untouched
          for (int64_t o = 0; o < outs[p]; ++o) ASSERT_EQ(y[p][size_t(t * outs[p] + o)], 0.5f);
        }
      }
      if (pack && !can_pack) GTEST_LOG_(INFO) << "no AVX-512 BF16: the packed case ran row-major";
    }
  }
}

}  // namespace
}  // namespace gk
