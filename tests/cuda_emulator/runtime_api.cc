// The CUDA runtime API as the emulator implements it: the functions gemmakit calls, with the
// toolkit's own declarations (cuda_runtime_api.h), so the same host code links against either
// this or libcudart. Device memory is host memory; work on a stream runs at once, in order,
// except on a stream being captured into a graph, where it is recorded and runs at each launch
// of the graph with the arguments it was captured with, as on the GPU.
//
// What a GPU would refuse is refused here too, with the runtime's error: launch
// configurations beyond the limits of an sm_90 device, dynamic shared memory above the
// kernel's opt-in, copies that run past the end of a device allocation, synchronizing a stream
// while it is captured. Memory from cudaMalloc starts as NaN bytes, as a GPU's starts as
// whatever was there.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernel_runner.h"

namespace gk_emu {
namespace {

constexpr size_t kDefaultMemory = size_t(4) << 30;
constexpr size_t kSharedOptIn = 232448;  // sm_90: 227 KiB per block after the opt-in
constexpr size_t kSharedDefault = 48 << 10;

size_t DeviceMemory() {
  static const size_t bytes = [] {
    const char* e = std::getenv("GK_CUDA_EMULATOR_MEMORY_MIB");
    return e != nullptr ? size_t(std::strtoull(e, nullptr, 10)) << 20 : kDefaultMemory;
  }();
  return bytes;
}

// An operation on a stream: run now, or kept by a graph being captured.
using Op = std::function<void()>;

struct Graph {
  std::vector<Op> ops;
};

struct Stream {
  Graph* capture = nullptr;
};

struct Event {
  std::chrono::steady_clock::time_point at{};
};

struct State {
  std::mutex mu;
  std::map<uintptr_t, size_t> allocations;  // base -> bytes
  size_t allocated = 0;
  std::map<const void*, int> max_dynamic_smem;
  Stream legacy;
  int capturing = 0;  // streams being captured
};

State& S() {
  static State* s = new State();  // never destroyed: buffers may be freed by static destructors
  return *s;
}

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t Fail(cudaError_t e) {
  last_error = e;
  return e;
}

Stream* ToStream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &S().legacy;
  return reinterpret_cast<Stream*>(s);
}

// Runs op now, or records it into the graph its stream is being captured into.
void Submit(cudaStream_t stream, Op op) {
  Stream* s = ToStream(stream);
  if (s->capture != nullptr) {
    s->capture->ops.push_back(std::move(op));
    return;
  }
  op();
}

// True if [p, p + n) lies inside one device allocation.
bool InDevice(const void* p, size_t n) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(a);
  if (it == s.allocations.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second;
}

[[noreturn]] void Abort(const std::string& what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A copy's device side must lie inside one allocation: on a GPU an overrun reads or writes
// someone else's memory (or faults); here it stops the process with the sizes.
void CheckDevice(const void* p, size_t n, const char* what) {
  if (n == 0 || InDevice(p, n)) return;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: %zu bytes at %p are not inside one device allocation", what, n, p);
  Abort(buf);
}

void CheckCopy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* what) {
  if (kind == cudaMemcpyDefault) return;  // either side; unchecked
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) CheckDevice(src, n, what);
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) CheckDevice(dst, n, what);
}

}  // namespace

cudaError_t RunKernel(const void* kernel, const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Entry entry, void* closure, void (*copy)(const void*, void**), void (*destroy)(void*)) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    std::fprintf(stderr, "cuda emulator: %s launched with grid (%u,%u,%u), block (%u,%u,%u): invalid configuration\n",
                 name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
    return Fail(cudaErrorInvalidConfiguration);
  }
  size_t allowed = kSharedDefault;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    if (auto it = S().max_dynamic_smem.find(kernel); it != S().max_dynamic_smem.end()) allowed = size_t(it->second);
  }
  if (smem > allowed) {
    std::fprintf(stderr, "cuda emulator: %s asks for %zu bytes of dynamic shared memory, above its %zu\n", name, smem,
                 allowed);
    return Fail(cudaErrorInvalidValue);
  }
  KernelCall k{name, grid, block, smem, entry, closure};
  if (ToStream(stream)->capture == nullptr) {
    ExecuteKernel(k);
    return cudaSuccess;
  }
  void* kept = nullptr;
  copy(closure, &kept);
  auto owned = std::shared_ptr<void>(kept, destroy);
  k.closure = kept;
  Submit(stream, [k, owned] { ExecuteKernel(k); });
  return cudaSuccess;
}

}  // namespace gk_emu

using namespace gk_emu;

// For the emulated cuBLASLt (cublaslt.cc, a library of its own): work on a stream, and the
// device-range check.
extern "C" __attribute__((visibility("default"))) void gk_emu_submit(cudaStream_t stream, std::function<void()>* op) {
  Submit(stream, std::move(*op));
}
extern "C" __attribute__((visibility("default"))) int gk_emu_in_device(const void* p, size_t n) {
  return InDevice(p, n) ? 1 : 0;
}

// --- errors ---

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    default: return "cuda emulator error";
  }
}
const char* cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

// --- the device ---

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "gemmakit CUDA emulator (CPU)");
  p->totalGlobalMem = DeviceMemory();
  p->sharedMemPerBlock = kSharedDefault;
  p->sharedMemPerBlockOptin = kSharedOptIn;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kSharedOptIn); break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || size_t(value) > kSharedOptIn) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(S().mu);
  S().max_dynamic_smem[func] = value;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (S().capturing > 0) return Fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

// The profiler's range (ncu/nsys --profile-from-start off): no profiler attaches to the emulator.
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }

// --- memory ---

cudaError_t cudaMalloc(void** p, size_t n) {
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.allocated + n > DeviceMemory()) return Fail(cudaErrorMemoryAllocation);
  }
  void* m = nullptr;
  if (posix_memalign(&m, 256, std::max<size_t>(n, 1)) != 0) return Fail(cudaErrorMemoryAllocation);
  std::memset(m, 0xff, n);
  std::lock_guard<std::mutex> lock(s.mu);
  s.allocations[reinterpret_cast<uintptr_t>(m)] = n;
  s.allocated += n;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == s.allocations.end()) return Fail(cudaErrorInvalidValue);
    s.allocated -= it->second;
    s.allocations.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(S().mu);
  *total = DeviceMemory();
  *free_bytes = DeviceMemory() - S().allocated;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  CheckCopy(dst, src, n, kind, "cudaMemcpy");
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  CheckCopy(dst, src, n, kind, "cudaMemcpyAsync");
  Submit(stream, [=] { std::memmove(dst, src, n); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (width > dpitch || width > spitch) return Fail(cudaErrorInvalidValue);
  if (height > 0) {
    const size_t span_d = dpitch * (height - 1) + width, span_s = spitch * (height - 1) + width;
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) CheckDevice(src, span_s, "cudaMemcpy2DAsync");
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) CheckDevice(dst, span_d, "cudaMemcpy2DAsync");
  }
  Submit(stream, [=] {
    for (size_t r = 0; r < height; ++r) {
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    }
  });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int v, size_t n) {
  CheckDevice(p, n, "cudaMemset");
  std::memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t stream) {
  CheckDevice(p, n, "cudaMemsetAsync");
  Submit(stream, [=] { std::memset(p, v, n); });
  return cudaSuccess;
}

// --- streams and graphs ---

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = reinterpret_cast<cudaStream_t>(new Stream());
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return Fail(cudaErrorInvalidResourceHandle);
  Stream* st = ToStream(s);
  if (st->capture != nullptr) return Fail(cudaErrorIllegalState);
  delete st;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (ToStream(s)->capture != nullptr) return Fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  Stream* st = ToStream(s);
  if (st == &S().legacy) return Fail(cudaErrorStreamCaptureUnsupported);
  if (st->capture != nullptr) return Fail(cudaErrorIllegalState);
  st->capture = new Graph();
  ++S().capturing;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  Stream* st = ToStream(s);
  if (st->capture == nullptr) return Fail(cudaErrorIllegalState);
  *graph = reinterpret_cast<cudaGraph_t>(st->capture);
  st->capture = nullptr;
  --S().capturing;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = ToStream(s)->capture != nullptr ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(new Graph(*reinterpret_cast<Graph*>(graph)));
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  const Graph* g = reinterpret_cast<const Graph*>(exec);
  Submit(stream, [g] {
    for (const Op& op : g->ops) op();
  });
  return cudaSuccess;
}

// The number of a graph's operations (kernels, copies, memsets); the nodes themselves are not kept.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (nodes != nullptr) return Fail(cudaErrorNotSupported);
  *count = reinterpret_cast<const Graph*>(graph)->ops.size();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<Graph*>(exec);
  return cudaSuccess;
}

// --- events ---

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new Event());
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  Event* ev = reinterpret_cast<Event*>(e);
  Submit(stream, [ev] { ev->at = std::chrono::steady_clock::now(); });
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto d = reinterpret_cast<Event*>(end)->at - reinterpret_cast<Event*>(start)->at;
  *ms = std::chrono::duration<float, std::milli>(d).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
