// Test support for the GPU's tests (included by *_test.cc under cuda/ only): skip without a
// device, fresh random data, NaN poison for outputs, and the relative error the checks use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/device.h"

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

inline std::vector<float> Poison(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

}  // namespace gk::cuda
