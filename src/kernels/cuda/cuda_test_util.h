// Test support for the GPU's tests (included by *_test.cc under cuda/ only): skip without a
// device, fresh random data, NaN poison for outputs, and the relative error the checks use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/device.h"
#include "tensor/dtype.h"

namespace gk::cuda {

#define SKIP_WITHOUT_GPU()                                                          \
  do {                                                                              \
    const ::gk::CudaInventory inv = ::gk::ListCudaDevices();                        \
    if (inv.devices.empty()) GTEST_SKIP() << "no CUDA device: " << inv.none_reason; \
  } while (0)

inline std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// max |a - b| / max |b|; NaN anywhere in a, or a size mismatch, fails (infinity).
inline double RelErr(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(a[i])) return std::numeric_limits<double>::infinity();
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  return RelErr(a.data(), b.data(), a.size());
}

// A stream and a cuBLASLt runner on it, freed in order.
struct GemmOnStream {
  cudaStream_t stream = nullptr;
  std::unique_ptr<GemmRunner> gemm;
  Status Create() {
    GK_RETURN_IF_ERROR(Check(cudaStreamCreate(&stream), "cudaStreamCreate"));
    GK_ASSIGN_OR_RETURN(gemm, GemmRunner::Create(stream));
    return Status::Ok();
  }
  ~GemmOnStream() {
    gemm.reset();
    if (stream) cudaStreamDestroy(stream);
  }
};

// y = x · Wᵀ in double, W given as floats (the bf16 values widened); x rounded to bf16 first
// where round_x.
inline std::vector<float> DoubleProduct(const std::vector<float>& w, const std::vector<float>& x, int64_t rows,
                                        int64_t cols, int64_t T, bool round_x = false) {
  std::vector<float> y(size_t(T * rows));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const float xv = x[size_t(t * cols + c)];
        s += double(w[size_t(r * cols + c)]) * double(round_x ? RoundToBf16(xv) : xv);
      }
      y[size_t(t * rows + r)] = float(s);
    }
  }
  return y;
}

// Random weights rounded to bf16: the same values as bf16 and as f32, on the device.
struct SameWeights {
  int64_t rows, cols;
  std::vector<float> w;
  DeviceBuffer<float> f32;
  DeviceBuffer<uint16_t> bf16;
  SameWeights(int64_t r, int64_t c, std::mt19937& rng) : rows(r), cols(c), w(Random(size_t(r * c), rng)) {
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w16[i] = F32ToBf16(w[i]);
      w[i] = Bf16ToF32(w16[i]);
    }
    auto a = DeviceBuffer<float>::From(w);
    auto b = DeviceBuffer<uint16_t>::From(w16);
    EXPECT_TRUE(a.ok() && b.ok());
    if (a.ok()) f32 = std::move(*a);
    if (b.ok()) bf16 = std::move(*b);
  }
  DeviceMatrix As(DType dt) const {
    return {dt, rows, cols, dt == DType::kF32 ? static_cast<const void*>(f32.data()) : bf16.data()};
  }
};

inline std::vector<float> Poison(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

}  // namespace gk::cuda
