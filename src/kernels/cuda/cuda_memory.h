// CUDA error codes as Status, and device memory that frees itself (kernels/cuda/ only: these
// headers need the CUDA runtime, which exists in GK_HAVE_CUDA builds alone).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "util/result.h"

namespace gk::cuda {

// Ok for cudaSuccess; else "WHAT: <the runtime's message>" (and the sticky error cleared).
inline Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Error(StrCat(what, ": ", cudaGetErrorString(e)));
}
// After a kernel launch: its configuration error, if any.
inline Status CheckLaunch(const char* kernel) { return Check(cudaGetLastError(), kernel); }

// n elements of T in device memory (plain cudaMalloc, never managed memory).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }

  static Result<DeviceBuffer> Allocate(size_t n) {
    DeviceBuffer b;
    GK_RETURN_IF_ERROR(Check(cudaMalloc(reinterpret_cast<void**>(&b.p_), n * sizeof(T)), "cudaMalloc"));
    b.n_ = n;
    return Result<DeviceBuffer>(std::move(b));  // explicit: nvcc does not move a returned local into Result
  }
  static Result<DeviceBuffer> From(const std::vector<T>& host) {
    GK_ASSIGN_OR_RETURN(DeviceBuffer b, Allocate(host.size()));
    GK_RETURN_IF_ERROR(Check(cudaMemcpy(b.p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                             "cudaMemcpy to the device"));
    // cudaMemcpy from pageable memory may return before the data lands, and on the legacy
    // stream, which the runners' non-blocking streams do not wait for: finish it here.
    GK_RETURN_IF_ERROR(Check(cudaDeviceSynchronize(), "cudaMemcpy to the device"));
    return Result<DeviceBuffer>(std::move(b));
  }
  // After every queued kernel (of any stream) that may write the buffer.
  Result<std::vector<T>> ToHost() const {
    std::vector<T> host(n_);
    GK_RETURN_IF_ERROR(Check(cudaDeviceSynchronize(), "cudaMemcpy from the device"));
    GK_RETURN_IF_ERROR(Check(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
                             "cudaMemcpy from the device"));
    return host;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace gk::cuda
