// The machine's physical limits, measured in the same run as a benchmark so that every
// figure can be printed as a ratio to its ceiling (this VM is noisy; ratios hold better than
// absolute numbers).
//   read bandwidth: each thread sums its own slice of a buffer much larger than the caches;
//   fp32 FMA peak: independent vfmadd231ps chains, 2 FLOPs per lane;
//   bf16 dot peak: vdpbf16ps chains, 2 FLOPs per bf16 pair (AVX-512 BF16 CPUs only);
//   sgemm rate: Sgemm (kernels/gemm.h: OpenBLAS, or oneDNN on AVX-512 CPUs) of a 512 × 2048 by
//     2048 × 2048 product (a prefill's shape) on all threads: the trainer's f32 product rate,
//     and the measured matrix-product rate a prefill is held to where the CPU has no
//     bf16 dot product (the speed issue's "measured matmul rate");
//   oneDNN bf16 rate: oneDNN's bf16 matmul of the same shape (bf16 inputs, f32 results) on all
//     threads, AVX-512 BF16 CPUs only: the measured matmul rate there (onednn_rate.cc).
#pragma once

#include <cstdint>

#include "tensor/thread_pool.h"

namespace gk {

struct Ceilings {
  double read_gbps = 0;       // GB/s (1e9 bytes)
  double fp32_gflops = 0;     // GFLOP/s
  double bf16_gflops = 0;     // GFLOP/s, 0 when the CPU lacks AVX-512 BF16
  double sgemm_gflops = 0;    // GFLOP/s
  double onednn_bf16_gflops = 0;  // GFLOP/s, 0 when the CPU lacks AVX-512 BF16
};

// Median of `repeats` runs of each probe on all of pool's threads. buffer_bytes should be
// several times the last-level cache.
Ceilings MeasureCeilings(ThreadPool& pool, uint64_t buffer_bytes = 1ull << 30, int repeats = 5);

// Sums n floats (n a multiple of 64, 64-byte aligned) with the widest loads the active ISA
// has: the read-bandwidth probe's inner loop, for benchmarks that pair it with their own work.
float StreamSum(const float* p, int64_t n);

double MeasureReadBandwidth(ThreadPool& pool, uint64_t buffer_bytes, int repeats);
double MeasureFp32Peak(ThreadPool& pool, int repeats);
double MeasureBf16Peak(ThreadPool& pool, int repeats);
double MeasureSgemmRate(int threads, int repeats);
double MeasureOnednnBf16Rate(int threads, int repeats);

}  // namespace gk
