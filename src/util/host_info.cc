#include "util/host_info.h"

#include <sys/resource.h>

#include <fstream>
#include <thread>

namespace gk {

std::string CpuModelName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "";
}

int HardwareThreads() { return int(std::thread::hardware_concurrency()); }

uint64_t TotalMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

uint64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;
}

}  // namespace gk
