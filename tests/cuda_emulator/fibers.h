// Fibers for the CUDA emulator: each CUDA thread of a block runs on its own stack, and switches
// back to the scheduler only where CUDA threads meet (__syncthreads, warp shuffles). The
// switch saves the System V callee-saved registers and the stack pointer, nothing else: about
// ten instructions, against the signal-mask system call of swapcontext.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gk_emu {

class FiberStack {
 public:
  // `index`: the stack's place among its OS thread's, which staggers its top (fibers.cc says why).
  FiberStack(size_t bytes, size_t index);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  // A stack pointer that starts `entry` (which must never return) at the next switch to it.
  void* Prepare(void (*entry)());

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  uint64_t* top_ = nullptr;  // 16-byte aligned, staggered (fibers.cc)
};

// Saves the running context's stack pointer in *save and continues the one at `load`.
extern "C" void gk_emu_switch(void** save, void* load);

}  // namespace gk_emu
