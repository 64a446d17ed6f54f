#include "kernels/device.h"

#include <fstream>
#include <thread>

#include "kernels/isa.h"
#include "kernels/matmul.h"

namespace gk {

#ifdef GK_HAVE_CUDA
CudaInventory QueryCudaRuntime();  // kernels/cuda/cuda_devices.cu
#endif

std::string DeviceSpec::ToString() const {
  return kind == DeviceKind::kCpu ? "cpu" : StrCat("cuda:", index);
}

Result<DeviceSpec> ParseDeviceSpec(const std::string& text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  d.kind = DeviceKind::kCuda;
  if (text == "cuda") return d;
  const std::string digits = text.starts_with("cuda:") ? text.substr(5) : "";
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Error(StrCat("--device: '", text, "' is not cpu, cuda or cuda:N"));
  }
  d.index = std::stoi(digits);
  return d;
}

CpuInfo DescribeCpu() {
  CpuInfo c;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) c.model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  c.threads = int(std::thread::hardware_concurrency());
  c.isa = std::string(IsaName(ActiveIsa()));
  c.avx512_bf16 = CpuHasAvx512Bf16();
  return c;
}

CudaInventory ListCudaDevices() {
#ifdef GK_HAVE_CUDA
  return QueryCudaRuntime();
#else
  CudaInventory inv;
  inv.none_reason = "this gemmakit was built without the CUDA backend (no nvcc at build time, or -DGK_CUDA=OFF)";
  return inv;
#endif
}

Status CheckDeviceAvailable(const DeviceSpec& spec) {
  if (spec.kind == DeviceKind::kCpu) return Status::Ok();
  const CudaInventory inv = ListCudaDevices();
  if (!inv.built_in) return Status::Error(StrCat("--device ", spec.ToString(), ": ", inv.none_reason));
  if (inv.devices.empty()) return Status::Error(StrCat("--device ", spec.ToString(), ": no CUDA device: ", inv.none_reason));
  if (spec.index >= int(inv.devices.size())) {
    return Status::Error(StrCat("--device ", spec.ToString(), ": this machine has ", inv.devices.size(),
                                " CUDA device(s), cuda:0 to cuda:", inv.devices.size() - 1));
  }
  const CudaDeviceInfo& d = inv.devices[size_t(spec.index)];
  if (d.major < kMinCudaMajor) {
    return Status::Error(StrCat("--device ", spec.ToString(), ": ", d.name, " has compute capability ", d.major, ".",
                                d.minor, "; the CUDA backend is built for ", kMinCudaMajor, ".0 (Hopper) and newer"));
  }
  return Status::Ok();
}

}  // namespace gk
