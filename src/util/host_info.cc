#include "util/host_info.h"

#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <string>
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

uint64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0, avail = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemAvailable:") {
      avail = kb * 1024;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  // cgroup v2: /proc/self/cgroup is "0::/path"; memory.max is a number or "max".
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    std::ifstream max_f(dir + "/memory.max"), cur_f(dir + "/memory.current");
    std::string max_s;
    uint64_t cur = 0;
    if (!(max_f >> max_s) || !(cur_f >> cur)) continue;
    char* end = nullptr;
    const uint64_t limit = std::strtoull(max_s.c_str(), &end, 10);
    if (end == max_s.c_str() || *end != '\0') continue;  // "max": no limit
    const uint64_t left = limit > cur ? limit - cur : 0;
    if (avail == 0 || left < avail) avail = left;
  }
  return avail;
}

uint64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;
}

}  // namespace gk
