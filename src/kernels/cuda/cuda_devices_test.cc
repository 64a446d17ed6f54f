// The CUDA runtime's inventory on a machine with a GPU (label cuda: skipped without one).
#include <gtest/gtest.h>

#include "kernels/device.h"

namespace gk {
namespace {

TEST(CudaDevices, ListsEachGpuWithItsMemory) {
  const CudaInventory inv = ListCudaDevices();
  ASSERT_TRUE(inv.built_in);
  EXPECT_GE(inv.runtime_version, 13000);
  if (inv.devices.empty()) GTEST_SKIP() << "no CUDA device: " << inv.none_reason;
  for (const CudaDeviceInfo& d : inv.devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.major, 1);
    EXPECT_GT(d.total_bytes, uint64_t(1) << 30);
    EXPECT_GT(d.free_bytes, 0u);
    EXPECT_LE(d.free_bytes, d.total_bytes);
    EXPECT_GT(d.multiprocessors, 0);
  }
  EXPECT_TRUE(CheckDeviceAvailable(*ParseDeviceSpec("cuda:0")).ok() || inv.devices[0].major < kMinCudaMajor);
  EXPECT_FALSE(CheckDeviceAvailable(*ParseDeviceSpec(StrCat("cuda:", inv.devices.size()))).ok());
}

}  // namespace
}  // namespace gk
