// When each request of a run is sent, as vLLM's get_request (vllm/benchmarks/serve.py):
// gaps from Gamma(shape = burstiness, scale = 1 / (rate * burstiness)) (Poisson at 1; constant
// 1/rate at burstiness = inf), summed into send times including one gap before the first
// request, then rescaled so the last request goes out at exactly n / rate. rate = inf sends
// everything at t = 0. Our generator is std::mt19937_64 seeded with `seed`, not numpy's, so
// the times differ from vLLM's for the same seed; their distribution does not.
#pragma once

#include <cstdint>
#include <vector>

namespace gk::bench {

// Offsets in seconds from the start of the run, one per request, non-decreasing.
// rate > 0 (may be +inf); burstiness > 0 (may be +inf).
std::vector<double> ArrivalOffsets(int n, double rate, double burstiness, uint64_t seed);

// The raw gaps before the rescale (for testing the distribution): n draws.
std::vector<double> GammaGaps(int n, double rate, double burstiness, uint64_t seed);

}  // namespace gk::bench
