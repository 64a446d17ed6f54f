// The CUDA emulator's own tests: that it runs kernels as CUDA defines them (coordinates,
// barriers, shuffles, graphs), and that it stops on what a GPU would get wrong or refuse.
// Compiled for the emulator only (cu_to_cc.py), into gemmakit_cuda_emulator_tests.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/gemm.h"

namespace gk::cuda {
namespace {

__global__ void CoordinatesKernel(uint32_t* out) {
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const uint32_t thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const uint32_t threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = (blockIdx.z << 24) | (blockIdx.y << 16) | (threadIdx.z << 8) | (threadIdx.y << 4) | threadIdx.x;
}

TEST(EmulatorTest, GivesEveryThreadItsCoordinates) {
  const dim3 grid{2, 3, 2}, block{4, 2, 3};
  const size_t n = 2 * 3 * 2 * 4 * 2 * 3;
  auto buf = DeviceBuffer<uint32_t>::Allocate(n).value();
  CoordinatesKernel<<<grid, block>>>(buf.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<uint32_t> got = buf.ToHost().value();
  size_t i = 0;
  for (uint32_t bz = 0; bz < 2; ++bz)
    for (uint32_t by = 0; by < 3; ++by)
      for (uint32_t bx = 0; bx < 2; ++bx)
        for (uint32_t tz = 0; tz < 3; ++tz)
          for (uint32_t ty = 0; ty < 2; ++ty)
            for (uint32_t tx = 0; tx < 4; ++tx, ++i) {
              ASSERT_EQ(got[i], (bz << 24) | (by << 16) | (tz << 8) | (ty << 4) | tx) << i;
            }
}

__global__ void SumKernel(float* out) {
  const float s = BlockSum(float(threadIdx.x));
  const float m = BlockMax(float(threadIdx.x));
  if (threadIdx.x == 0) out[blockIdx.x * 2] = s, out[blockIdx.x * 2 + 1] = m;
}

__global__ void ScanKernel(int* out) {  // an inclusive prefix sum over each warp
  int v = 1;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, v, o);
    if (int(threadIdx.x % 32) >= o) v += up;
  }
  out[threadIdx.x] = v;
}

TEST(EmulatorTest, ReducesAndScansAcrossWarpsAndBlocks) {
  auto sums = DeviceBuffer<float>::Allocate(6).value();
  SumKernel<<<3, 256>>>(sums.data());
  const std::vector<float> s = sums.ToHost().value();
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(s[b * 2], 255.f * 256.f / 2.f);
    EXPECT_EQ(s[b * 2 + 1], 255.f);
  }
  auto scan = DeviceBuffer<int>::Allocate(64).value();
  ScanKernel<<<1, 64>>>(scan.data());
  const std::vector<int> got = scan.ToHost().value();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], i % 32 + 1) << i;
}

// Shuffles back to back with values that differ at every one, in a block of 48 threads: the
// whole first warp (the emulator alternates two banks of values for it) and the second warp's
// 16 lanes under their mask (which wait again after reading). Each lane's sum is worked out on
// the host.
__global__ void BackToBackShufflesKernel(int* out) {
  const int lane = int(threadIdx.x % 32), width = threadIdx.x < 32 ? 32 : 16;
  const unsigned mask = width == 32 ? 0xffffffffu : 0x0000ffffu;
  int acc = 0;
  for (int r = 0; r < 5; ++r) {
    acc += __shfl_sync(mask, lane + r * 100, (lane + r + 1) % width);
    acc += __shfl_xor_sync(mask, lane * 3 + r, 1) * 1000;
    acc += __shfl_down_sync(mask, lane * 7 + r, 2, width) * 100000;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

TEST(EmulatorTest, BackToBackShufflesTakeEachShufflesValues) {
  auto out = DeviceBuffer<int>::Allocate(2 * 48).value();
  BackToBackShufflesKernel<<<2, 48>>>(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = out.ToHost().value();
  for (int i = 0; i < 2 * 48; ++i) {
    const int lane = i % 48 % 32, width = i % 48 < 32 ? 32 : 16;
    int want = 0;
    for (int r = 0; r < 5; ++r) {
      want += (lane + r + 1) % width + r * 100;
      want += ((lane ^ 1) * 3 + r) * 1000;
      want += ((lane + 2 < width ? lane + 2 : lane) * 7 + r) * 100000;
    }
    ASSERT_EQ(got[size_t(i)], want) << "thread " << i;
  }
}

// Thread 0 reads what thread 1 writes; only the barrier makes it see the value.
template <bool kSync>
__global__ void NeighbourKernel(int* out) {
  __shared__ int cell;
  if (threadIdx.x == 1) cell = 7;
  if (kSync) __syncthreads();
  if (threadIdx.x == 0) out[0] = cell;
}

// Runs the test body under one schedule, then restores the one the process started with.
class ScheduleOrder {
 public:
  explicit ScheduleOrder(const char* order) { EXPECT_TRUE(gk_emu::SetScheduleOrder(order)) << order; }
  ~ScheduleOrder() { gk_emu::SetScheduleOrder(std::getenv("GK_CUDA_EMULATOR_ORDER")); }
};

TEST(EmulatorTest, AMissingBarrierShowsAsAStaleRead) {
  ScheduleOrder forward("forward");
  auto out = DeviceBuffer<int>::Allocate(1).value();
  NeighbourKernel<true><<<1, 32>>>(out.data());
  EXPECT_EQ(out.ToHost().value()[0], 7);
  // Threads run in order until they meet, so thread 0 reads before thread 1 writes: a race
  // the GPU might hide shows every time.
  int stale = 0;
  ASSERT_EQ(cudaMemset(out.data(), 0, sizeof(int)), cudaSuccess);
  NeighbourKernel<false><<<1, 32>>>(out.data());
  stale = out.ToHost().value()[0];
  EXPECT_NE(stale, 7);
}

// Each block reads its __shared__ cell before writing it: on the GPU the cell starts undefined
// at every block, here it is 0xff bytes (-1), never the block before's 7.
__global__ void ReadsSharedBeforeWritingKernel(int* out) {
  __shared__ int cell;
  if (threadIdx.x == 0) out[blockIdx.x] = cell;
  __syncthreads();
  if (threadIdx.x == 0) cell = 7;
}

TEST(EmulatorTest, EachBlockFindsItsSharedVariablesUndefined) {
  auto out = DeviceBuffer<int>::Allocate(3).value();
  for (int launch = 0; launch < 2; ++launch) {
    ReadsSharedBeforeWritingKernel<<<3, 32>>>(out.data());
    EXPECT_EQ(out.ToHost().value(), (std::vector<int>{-1, -1, -1}));
  }
}

// Thread 1 reads what thread 0 writes, and block 1 what block 0 writes, with nothing between:
// thread and block order hide both races.
// (The cell is dynamic shared memory, which the emulator fills with 0xff bytes at each block.)
__global__ void ReadsEarlierThreadKernel(int* out) {
  extern __shared__ int cell[];
  if (threadIdx.x == 0) cell[0] = 7 + int(blockIdx.x);
  if (threadIdx.x == 1) out[blockIdx.x] = cell[0];
}
__global__ void ReadsEarlierBlockKernel(int* out) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) out[0] = 7;
  if (blockIdx.x == 1) out[1] = out[0];
}

// Runs `launch` on zeroed memory and returns out[i] for i < n.
template <class F>
std::vector<int> Outcome(DeviceBuffer<int>& out, F launch) {
  EXPECT_EQ(cudaMemset(out.data(), 0, out.size() * sizeof(int)), cudaSuccess);
  launch();
  return out.ToHost().value();
}

TEST(EmulatorTest, TheOtherOrdersShowWhatThreadOrderHides) {
  auto out = DeviceBuffer<int>::Allocate(2).value();
  const auto thread_race = [&] { ReadsEarlierThreadKernel<<<2, 32, sizeof(int)>>>(out.data()); };
  const auto block_race = [&] { ReadsEarlierBlockKernel<<<2, 32>>>(out.data()); };
  {
    ScheduleOrder forward("forward");  // hidden
    EXPECT_EQ(Outcome(out, thread_race), (std::vector<int>{7, 8}));
    EXPECT_EQ(Outcome(out, block_race), (std::vector<int>{7, 7}));
  }
  {
    ScheduleOrder reverse("reverse");  // thread 1 and block 1 run first: both reads are stale
    const std::vector<int> t = Outcome(out, thread_race), b = Outcome(out, block_race);
    EXPECT_EQ(t, (std::vector<int>{-1, -1}));
    EXPECT_EQ(b, (std::vector<int>{7, 0}));
  }
  // Shuffled: each block and launch draws its own order, the same again under the same seed.
  std::vector<int> first_run;
  for (int run = 0; run < 2; ++run) {
    ScheduleOrder shuffle("shuffle:5");
    int hidden = 0, shown = 0;
    std::vector<int> seen;
    for (int launch = 0; launch < 16; ++launch) {
      const std::vector<int> t = Outcome(out, thread_race);
      for (int b = 0; b < 2; ++b) (t[size_t(b)] == 7 + b ? hidden : shown)++;
      seen.insert(seen.end(), t.begin(), t.end());
    }
    EXPECT_GT(hidden, 0);
    EXPECT_GT(shown, 0);
    if (run == 0) first_run = seen;
    else EXPECT_EQ(seen, first_run);
  }
  EXPECT_FALSE(gk_emu::SetScheduleOrder("sideways"));
  EXPECT_FALSE(gk_emu::SetScheduleOrder("shuffle:"));
  EXPECT_FALSE(gk_emu::SetScheduleOrder("shuffle:1x"));
}

__global__ void PartialWarpShuffleKernel(float* out) { out[threadIdx.x] = WarpSum(1.f); }

// Half a warp at __syncthreads, the other half at a full-warp shuffle that waits for it.
__global__ void MismatchedBarriersKernel(float* out) {
  if (threadIdx.x % 32 < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = WarpSum(1.f);
  }
}

TEST(EmulatorDeathTest, StopsOnWhatTheGpuGetsWrong) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto out = DeviceBuffer<float>::Allocate(64).value();
  // A full-mask shuffle in a block of 16 threads: lanes 16-31 do not exist.
  EXPECT_DEATH(PartialWarpShuffleKernel<<<1, 16>>>(out.data()), "names lane 16, which does not exist");
  // Lanes of one warp waiting at different barriers.
  EXPECT_DEATH(MismatchedBarriersKernel<<<1, 64>>>(out.data()), "deadlock in MismatchedBarriersKernel");
  // A copy past the end of a device allocation.
  std::vector<float> host(65);
  EXPECT_DEATH(cudaMemcpy(out.data(), host.data(), 65 * sizeof(float), cudaMemcpyHostToDevice),
               "not inside one device allocation");
}

TEST(EmulatorTest, RefusesLaunchesAGpuRefuses) {
  auto out = DeviceBuffer<float>::Allocate(2048).value();
  PartialWarpShuffleKernel<<<1, 2048>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  PartialWarpShuffleKernel<<<dim3{1, 70000}, 32>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // Dynamic shared memory above 48 KiB needs the kernel's opt-in first.
  PartialWarpShuffleKernel<<<1, 32, 64 << 10>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(PartialWarpShuffleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10),
            cudaSuccess);
  PartialWarpShuffleKernel<<<1, 32, 64 << 10>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

__global__ void AddKernel(float* x, float v) { x[threadIdx.x] += v; }

TEST(EmulatorTest, GraphsReplayWhatWasCapturedWithItsArguments) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto x = DeviceBuffer<float>::Allocate(4).value();
  ASSERT_EQ(cudaMemsetAsync(x.data(), 0, 4 * sizeof(float), s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  float v = 2.f;
  AddKernel<<<1, 4, 0, s>>>(x.data(), v);
  v = 100.f;  // the graph keeps the 2 it was captured with
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  // The refusal is also the last error, which the next launch's check would report: read it.
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(x.ToHost().value()[0], 0.f);  // captured, not run
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<float> got = x.ToHost().value();
  for (float e : got) EXPECT_EQ(e, 4.f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(EmulatorDeathTest, CublasLtRefusesOperandsBelowTheAlignmentAssumed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GemmOnStream g;
  ASSERT_TRUE(g.Create().ok());
  auto w = DeviceBuffer<float>::Allocate(64 * 64).value();
  auto x = DeviceBuffer<float>::Allocate(64 * 64 + 1).value();
  auto y = DeviceBuffer<float>::Allocate(64 * 64).value();
  const DeviceMatrix m{DType::kF32, 64, 64, w.data()};
  ASSERT_TRUE(g.gemm->RunPrepared(m, x.data(), 64, y.data(), 0.f).ok());
  // One float in: 4-byte aligned, where the algorithm was chosen for 16.
  EXPECT_DEATH((void)g.gemm->RunPrepared(m, x.data() + 1, 63, y.data(), 0.f), "not aligned to the 16 bytes");
}

}  // namespace
}  // namespace gk::cuda
