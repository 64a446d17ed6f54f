// Which processor runs a command's model (`--device cpu | cuda | cuda:N`, issue "CUDA backend"),
// and what this machine has: the CPU's instruction set and threads, and each CUDA device
// (name, compute capability, memory) when the CUDA backend is built in (GK_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.h"

namespace gk {

enum class DeviceKind { kCpu, kCuda };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // cuda:N
  std::string ToString() const;  // "cpu", "cuda:0"
};

// "cpu", "cuda" (= cuda:0), "cuda:N".
Result<DeviceSpec> ParseDeviceSpec(const std::string& text);

struct CpuInfo {
  std::string model;     // /proc/cpuinfo's "model name"
  int threads = 0;       // hardware threads
  std::string isa;       // the SIMD path the kernels take (kernels/isa.h)
  bool avx512_bf16 = false;
};
CpuInfo DescribeCpu();

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  uint64_t total_bytes = 0, free_bytes = 0;
  int multiprocessors = 0;
};

struct CudaInventory {
  bool built_in = false;    // compiled with the CUDA backend
  int runtime_version = 0;  // cudaRuntimeGetVersion (13000 = 13.0); 0 when not built in
  std::vector<CudaDeviceInfo> devices;
  std::string none_reason;  // why no device is listed ("" when some are)
};
// Queries the CUDA runtime (never fails: a missing driver or device is a none_reason).
CudaInventory ListCudaDevices();

// The oldest GPU the CUDA backend is built for: sm_90 (Hopper), with PTX for newer ones.
inline constexpr int kMinCudaMajor = 9;

// Whether `spec` can run here: always for the CPU; for cuda:N, one clear sentence when the
// backend is not built in, no device is found, N is past the last device, or the device is
// older than sm_90.
Status CheckDeviceAvailable(const DeviceSpec& spec);

}  // namespace gk
