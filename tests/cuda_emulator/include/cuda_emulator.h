// The CUDA emulator's device side: what a kernel source (src/**/*.cu, rewritten by
// cu_to_cc.py) needs to compile as plain C++ and run on the CPU. Every CUDA thread of a block
// is a fiber (runtime.cc); __syncthreads and the warp shuffles are where the fibers meet.
// Types (dim3, __nv_bfloat16, __half, fp8) and their host conversions are the CUDA toolkit's
// own headers; only what exists on the device alone is written here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// The execution-space qualifiers mean nothing on the CPU; __shared__ storage is one copy per
// block: the blocks of a launch run one after another on one OS thread (static thread_local;
// cu_to_cc.py makes each block find a function's __shared__ variables undefined: FreshShared).
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __launch_bounds__(...)

namespace gk_emu {

// The running CUDA thread's coordinates, set by the fiber scheduler at every switch.
struct ThreadCoords {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local const ThreadCoords* tls_coords;

// Fiber meeting points (runtime.cc): opaque calls, so the compiler reloads shared memory
// after them.
void SyncThreads();
void SyncWarp(unsigned mask);
// Lane `src_lane`'s copy of `bytes` bytes that every lane of the warp in `mask` offers.
void WarpExchange(unsigned mask, const void* mine, int src_lane, void* out, size_t bytes);
int LaneId();
void* DynamicShared();
// Fills a static __shared__ variable with 0xff bytes the first time the running block reaches
// its declaration (cu_to_cc.py adds the call): on the GPU it starts undefined at every block.
void FreshShared(void* var, size_t bytes);
[[noreturn]] void Fail(const char* what);
// The order blocks and each block's threads run in: "forward" (thread and block order, the
// default), "reverse", or "shuffle:SEED" (a seeded permutation for every block and launch). The
// environment's GK_CUDA_EMULATOR_ORDER sets it at start; false for a text of none of these.
bool SetScheduleOrder(const char* order);

// A launch: kernel<<<grid, block, smem, stream>>>(args...) becomes
// gk_emu::Launch(grid, block, smem, stream)("kernel", kernel, args...).
using Entry = void (*)(void* closure);
cudaError_t RunKernel(const void* kernel, const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Entry entry,
                      void* closure, void (*copy)(const void* from, void** to), void (*destroy)(void*));

struct Launch {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  Launch(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), smem(s), stream(st) {}

  // The kernel's parameters by value, as the GPU receives them (converted to the parameter
  // types at the launch, as a call would).
  template <class... P, class... A>
  void operator()(const char* name, void (*kernel)(P...), A&&... args) const {
    using Closure = std::tuple<void (*)(P...), std::decay_t<P>...>;
    Closure c(kernel, std::decay_t<P>(std::forward<A>(args))...);
    RunKernel(
        reinterpret_cast<const void*>(kernel), name, grid, block, smem, stream,
        [](void* p) {
          auto& cl = *static_cast<Closure*>(p);
          std::apply([](auto fn, auto... a) { fn(a...); }, cl);
        },
        &c, [](const void* from, void** to) { *to = new Closure(*static_cast<const Closure*>(from)); },
        [](void* p) { delete static_cast<Closure*>(p); });
  }
};

}  // namespace gk_emu

// cuda_runtime.h's C++ overload takes a kernel (a template's specialization too) for the C API's
// const void*; nvcc's host compiler sees it, g++ here does not.
template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

#define threadIdx (static_cast<const uint3&>(::gk_emu::tls_coords->thread_idx))
#define blockIdx (static_cast<const uint3&>(::gk_emu::tls_coords->block_idx))
#define blockDim (static_cast<const dim3&>(::gk_emu::tls_coords->block_dim))
#define gridDim (static_cast<const dim3&>(::gk_emu::tls_coords->grid_dim))
constexpr int warpSize = 32;

// The device's global math overloads (CUDA's math_functions.h): min and max of two numbers of
// any arithmetic types, promoted as C++ does; isnan and friends unqualified.
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(a) < C(b) ? C(b) : C(a);
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(b) < C(a) ? C(b) : C(a);
}
using std::isfinite;
using std::isinf;
using std::isnan;

inline void __syncthreads() { ::gk_emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::gk_emu::SyncWarp(mask); }

namespace gk_emu {
// Every shuffle: this lane's v offered, lane src's taken (the variants differ in src only).
template <class T>
T ShuffleFrom(unsigned mask, T v, int src) {
  T out;
  WarpExchange(mask, &v, src, &out, sizeof(T));
  return out;
}
}  // namespace gk_emu
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = ::gk_emu::LaneId();
  return ::gk_emu::ShuffleFrom(mask, v, (lane / width) * width + (src % width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::gk_emu::LaneId();
  int src = lane ^ lane_mask;
  if (src / width != lane / width) src = lane;  // beyond its segment a lane keeps its own value
  return ::gk_emu::ShuffleFrom(mask, v, src);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::gk_emu::LaneId();
  return ::gk_emu::ShuffleFrom(mask, v, (lane % width) >= int(delta) ? lane - int(delta) : lane);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::gk_emu::LaneId();
  return ::gk_emu::ShuffleFrom(mask, v, (lane % width) + int(delta) < width ? lane + int(delta) : lane);
}

// Atomics: the blocks run on one OS thread, but std::atomic_ref keeps them honest if that
// changes.
template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T>
T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (old > v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v);
}
template <class T>
T atomicCAS(T* p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
  return expected;
}

// Device-only math: the host's IEEE operations (the GPU's are correctly rounded too; the
// fast-math ones, __expf and the like, are within a few ulp of these).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double x) { return std::sqrt(x); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
