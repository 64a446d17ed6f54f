// gemmakit devices [--json]
// What can run a model here: the CPU (model, threads, the kernels' instruction set) and each
// CUDA device (name, compute capability, memory), or why none is listed: the CUDA backend not
// built in, or built in and no device (or no driver) found.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "kernels/device.h"

namespace gk::cli {

int RunDevices(int argc, char** argv) {
  CLI::App app{"List the CPU and the CUDA devices gemmakit can run models on"};
  bool json = false;
  app.add_flag("--json", json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  const CpuInfo cpu = DescribeCpu();
  const CudaInventory cuda = ListCudaDevices();
  auto gib = [](uint64_t b) { return double(b) / double(uint64_t(1) << 30); };
  if (json) {
    nlohmann::ordered_json j;
    j["cpu"] = {{"model", cpu.model}, {"threads", cpu.threads}, {"isa", cpu.isa}, {"avx512_bf16", cpu.avx512_bf16}};
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const CudaDeviceInfo& d : cuda.devices) {
      devices.push_back({{"device", StrCat("cuda:", d.index)},
                         {"name", d.name},
                         {"compute_capability", StrCat(d.major, ".", d.minor)},
                         {"total_bytes", d.total_bytes},
                         {"free_bytes", d.free_bytes},
                         {"multiprocessors", d.multiprocessors},
                         {"supported", d.major >= kMinCudaMajor}});
    }
    j["cuda"] = {{"built_in", cuda.built_in},
                 {"runtime_version", cuda.runtime_version},
                 {"devices", devices},
                 {"none_reason", cuda.none_reason}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("cpu: %s, %d threads, kernels: %s%s\n", cpu.model.empty() ? "(unknown model)" : cpu.model.c_str(),
              cpu.threads, cpu.isa.c_str(), cpu.avx512_bf16 ? " with AVX-512 BF16" : "");
  if (!cuda.built_in) {
    std::printf("cuda: not built in: %s\n", cuda.none_reason.c_str());
    return 0;
  }
  const int rt = cuda.runtime_version;
  if (cuda.devices.empty()) {
    std::printf("cuda: built in (runtime %d.%d), no device found: %s\n", rt / 1000, rt % 1000 / 10,
                cuda.none_reason.c_str());
    return 0;
  }
  for (const CudaDeviceInfo& d : cuda.devices) {
    std::printf("cuda:%d: %s, compute capability %d.%d, %.1f GiB (%.1f GiB free), %d multiprocessors%s\n", d.index,
                d.name.c_str(), d.major, d.minor, gib(d.total_bytes), gib(d.free_bytes), d.multiprocessors,
                d.major >= kMinCudaMajor ? "" : " (not supported: the backend needs compute capability 9.0+)");
  }
  return 0;
}

}  // namespace gk::cli
