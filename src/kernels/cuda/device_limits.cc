#include "kernels/cuda/device_limits.h"

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/gemm.h"

namespace gk::cuda {
namespace {

// Seconds of the best of `reps` runs of fn on the stream, timed with events after one warm-up.
template <class Fn>
Result<double> BestSeconds(cudaStream_t stream, int reps, Fn fn) {
  cudaEvent_t start = nullptr, stop = nullptr;
  GK_RETURN_IF_ERROR(Check(cudaEventCreate(&start), "cudaEventCreate"));
  GK_RETURN_IF_ERROR(Check(cudaEventCreate(&stop), "cudaEventCreate"));
  double best = 1e30;
  Status st = fn();
  for (int i = 0; i < reps && st.ok(); ++i) {
    cudaEventRecord(start, stream);
    st = fn();
    cudaEventRecord(stop, stream);
    if (st.ok()) st = Check(cudaEventSynchronize(stop), "timing on the GPU");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::min(best, double(ms) * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!st.ok()) return st;
  return best;
}

}  // namespace

Result<DeviceLimits> MeasureDeviceLimits() {
  // GEMMAKIT_DEVICE_LIMITS_QUICK=1: a 64 MiB copy and a 512³ product, for the CUDA emulator
  // (docs/CUDA_EMULATOR.md), which runs the code but would take hours over the real sizes.
  const char* quick_env = std::getenv("GEMMAKIT_DEVICE_LIMITS_QUICK");
  const bool quick = quick_env && *quick_env && *quick_env != '0';
  DeviceLimits d;
  cudaStream_t stream = nullptr;
  GK_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};
  {
    const size_t bytes = quick ? size_t(64) << 20 : size_t(2) << 30;
    GK_ASSIGN_OR_RETURN(auto a, DeviceBuffer<std::byte>::Allocate(bytes));
    GK_ASSIGN_OR_RETURN(auto b, DeviceBuffer<std::byte>::Allocate(bytes));
    GK_RETURN_IF_ERROR(FillRandom(a.data(), DType::kF32, int64_t(bytes / 4), 1.f, 1, stream));
    GK_ASSIGN_OR_RETURN(double s, BestSeconds(stream, 5, [&] {
                          return Check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream),
                                       "cudaMemcpy device to device");
                        }));
    d.copy_bytes_per_s = 2.0 * double(bytes) / s;
  }
  {
    const int64_t n = quick ? 512 : 8192;
    GK_ASSIGN_OR_RETURN(auto w, DeviceBuffer<uint16_t>::Allocate(size_t(n * n)));
    GK_ASSIGN_OR_RETURN(auto x, DeviceBuffer<uint16_t>::Allocate(size_t(n * n)));
    GK_ASSIGN_OR_RETURN(auto y, DeviceBuffer<float>::Allocate(size_t(n * n)));
    GK_RETURN_IF_ERROR(FillRandom(w.data(), DType::kBF16, n * n, 1.f, 2, stream));
    GK_RETURN_IF_ERROR(FillRandom(x.data(), DType::kBF16, n * n, 1.f, 3, stream));
    GK_ASSIGN_OR_RETURN(auto gemm, GemmRunner::Create(stream));
    const DeviceMatrix m{DType::kBF16, n, n, w.data()};
    GK_ASSIGN_OR_RETURN(double s, BestSeconds(stream, 5, [&] { return gemm->RunPrepared(m, x.data(), n, y.data(), 0.f); }));
    d.bf16_flop_per_s = 2.0 * double(n) * double(n) * double(n) / s;
  }
  return d;
}

}  // namespace gk::cuda
