// Values of `gemmakit serve` flags that need more than a number: byte sizes with units
// (--kv-cache-memory 2GiB) and KV-cache dtype names (--kv-cache-dtype, vLLM's spellings).
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::server {

// "1073741824", "2GiB", "512MiB", "1.5G", "800MB", "64k": K/M/G/T and KiB/MiB/GiB/TiB are
// powers of 1024, KB/MB/GB/TB powers of 1000; a trailing B is optional; case-insensitive.
Result<uint64_t> ParseByteSize(const std::string& text);

// auto -> kUnknown (the engine's choice), f32|float32, f16|float16|half, bf16|bfloat16,
// fp8|fp8_e4m3 -> kFp8E4m3 (vLLM's "fp8" is e4m3 on CUDA), fp8_e5m2 -> kFp8E5m2.
Result<DType> ParseKvCacheDType(const std::string& text);

// Total physical memory in bytes (0 if unknown) and the resident size of this process.
uint64_t PhysicalMemoryBytes();
uint64_t ResidentBytes();

}  // namespace gk::server
