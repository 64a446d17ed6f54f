// The CUDA runtime's view of this machine, for `gemmakit devices` and --device checks.
#include <cuda_runtime.h>

#include "kernels/device.h"

namespace gk {

CudaInventory QueryCudaRuntime() {
  CudaInventory inv;
  inv.built_in = true;
  cudaRuntimeGetVersion(&inv.runtime_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver (libcuda) or no GPU: the runtime says which.
    const char* what = err == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than this CUDA runtime"
                       : err == cudaErrorNoDevice         ? "no CUDA GPU"
                                                          : "the CUDA runtime failed";
    inv.none_reason = StrCat(what, " (cudaGetDeviceCount: ", cudaGetErrorString(err), ")");
    cudaGetLastError();  // clear the sticky error
    return inv;
  }
  if (count == 0) inv.none_reason = "cudaGetDeviceCount found 0 devices";
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    CudaDeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.total_bytes = p.totalGlobalMem;
    d.multiprocessors = p.multiProcessorCount;
    size_t free_bytes = 0, total = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) d.free_bytes = free_bytes;
    inv.devices.push_back(d);
  }
  if (restore) cudaSetDevice(current);  // listing leaves the caller's device current
  return inv;
}

}  // namespace gk
