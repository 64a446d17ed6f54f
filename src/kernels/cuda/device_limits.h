// The two ceilings a GPU figure is compared with, measured in the same run (docs/PERF.md):
// device-to-device copy bandwidth (bytes read plus bytes written per second: the decode limit)
// and cuBLASLt's bf16 GEMM rate with f32 accumulation on random data (the prefill limit).
#pragma once

#include <cstdint>

#include "util/result.h"

namespace gk::cuda {

struct DeviceLimits {
  double copy_bytes_per_s = 0;  // a 2 GiB cudaMemcpy device to device, best of several
  double bf16_flop_per_s = 0;   // an 8192³ bf16 product, best of several
};

// On the current device; takes about a second. Errors: CUDA's, cuBLASLt missing.
// GEMMAKIT_DEVICE_LIMITS_QUICK=1 measures tiny sizes instead (the CUDA emulator's runs).
Result<DeviceLimits> MeasureDeviceLimits();

}  // namespace gk::cuda
