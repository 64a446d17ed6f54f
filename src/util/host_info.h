// Facts about the machine a run is on, for result files (benchmarks, training_run.json).
#pragma once

#include <cstdint>
#include <string>

namespace gk {

std::string CpuModelName();   // /proc/cpuinfo "model name", "" when unknown
int HardwareThreads();        // std::thread::hardware_concurrency
uint64_t TotalMemoryBytes();  // MemTotal of /proc/meminfo, 0 when unknown
// Memory a new allocation can get: MemAvailable of /proc/meminfo, capped by this process's
// cgroup v2 limit less its usage (a container's memory.max); 0 when unknown.
uint64_t AvailableMemoryBytes();
uint64_t PeakRssBytes();      // this process's peak resident set (getrusage)

}  // namespace gk
