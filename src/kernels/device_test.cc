#include "kernels/device.h"

#include <gtest/gtest.h>

namespace gk {
namespace {

TEST(DeviceSpec, Parses) {
  EXPECT_EQ(ParseDeviceSpec("cpu")->kind, DeviceKind::kCpu);
  EXPECT_EQ(ParseDeviceSpec("cuda")->ToString(), "cuda:0");
  EXPECT_EQ(ParseDeviceSpec("cuda:3")->index, 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:99999", "CPU", ""}) {
    auto d = ParseDeviceSpec(bad);
    EXPECT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.message().find("is not cpu, cuda or cuda:N"), std::string::npos) << d.message();
  }
}

// Where no GPU is usable (CI, this machine), --device cuda is one sentence saying why.
TEST(DeviceSpec, CudaWithoutADeviceSaysWhy) {
  EXPECT_TRUE(CheckDeviceAvailable(DeviceSpec{}).ok());
  const CudaInventory inv = ListCudaDevices();
  if (!inv.devices.empty()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_FALSE(inv.none_reason.empty());
  const Status s = CheckDeviceAvailable(*ParseDeviceSpec("cuda:1"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find(inv.built_in ? "no CUDA device" : "built without the CUDA backend"), std::string::npos)
      << s.message();
}

TEST(DeviceSpec, DescribesTheCpu) {
  const CpuInfo c = DescribeCpu();
  EXPECT_GT(c.threads, 0);
  EXPECT_FALSE(c.isa.empty());
}

}  // namespace
}  // namespace gk
